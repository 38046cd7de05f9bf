// Package atomicfile replaces small state files (checkpoints) so that a
// crash at any point leaves either the old or the new content, never a mix,
// and keeps the evidence of a bad file without letting it pile up.
//
// atomicfile.go holds the file operations. WriteFile writes a
// dot-prefixed temporary file in the target's directory, fsyncs it,
// renames it over the target and fsyncs the directory, so the rename
// itself survives a power loss (the kubelet's filestore stops before the
// last step). Quarantine moves a file that failed verification aside as
// "<name>.corrupt-<UTC time>"; Clean removes temporary files a killed
// writer left behind and all but the newest quarantined copies. Every
// checkpoint of cgpilot goes through this package, so they share one
// naming and one error form.
//
// Errors are *os.PathError-style errors naming the file and the step that
// failed; callers wrap them with their own sentinel. CorruptError
// (corrupt.go) is what a checkpoint reader returns for a file that does
// not verify or decode, with the reader's sentinel as its Kind: the
// pools' and the recommender's checkpoints share it. Seal, OpenEnvelope
// and Envelope.Verify (envelope.go) are the checksummed JSON envelope of
// the JSON state files (the pools' checkpoint, the OOM bump log). It
// imports only the standard library.
package atomicfile
