package oomwatch

// Regenerate the BPF object and its Go bindings (needs clang-19 and
// llvm-strip-19; CI checks that the committed files match):
//
//	go generate ./agent/oomwatch
//
// -target bpfel: the program reads no pt_regs, so one little-endian object
// serves amd64 and arm64. llvm-strip drops DWARF; the BTF that CO-RE needs
// stays. The minimal bpf/core.h stands in for a 3 MB vmlinux.h.
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target bpfel -type event oomwatch ./bpf/oomwatch.bpf.c -- -I./bpf -O2 -g -Wall -Werror
