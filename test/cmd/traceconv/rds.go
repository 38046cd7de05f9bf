package main

import (
	"bufio"
	"compress/bzip2"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// R's serialization format (XDR, version 2 or 3), only as far as the
// DataCenterSim .rda files need it: numeric, integer, logical and character
// vectors, lists, pairlists with tags, symbols and their back-references.
// Written here because no Go library reads R data and the format subset is
// small; anything else is an error naming the SEXP type.

// rObj is one decoded R object.
type rObj struct {
	typ   int
	reals []float64
	ints  []int32
	strs  []string
	elems []*rObj // VECSXP elements, LISTSXP values
	tags  []string
	attr  map[string]*rObj
	sym   string // SYMSXP name
}

const (
	rNIL     = 0
	rSYM     = 1
	rLIST    = 2
	rCHAR    = 9
	rLGL     = 10
	rINT     = 13
	rREAL    = 14
	rSTR     = 16
	rVEC     = 19
	rREF     = 255
	rNILVAL  = 254
	rGLOBAL  = 253
	rEMPTY   = 242
	rMissing = 251
	rBASEENV = 241
	rNAINT   = math.MinInt32
)

type rReader struct {
	r    *bufio.Reader
	refs []*rObj
	n    int // objects read, bounds runaway input
}

var errRDS = errors.New("rds")

// readRDA decodes an .rda (RDX2/RDX3, optionally gzip/bzip2-compressed)
// and returns its objects by name.
func readRDA(r io.Reader) (map[string]*rObj, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(3)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errRDS, err)
	}
	switch {
	case magic[0] == 'B' && magic[1] == 'Z' && magic[2] == 'h':
		br = bufio.NewReader(bzip2.NewReader(br))
	case magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errRDS, err)
		}
		br = bufio.NewReader(zr)
	}
	head := make([]byte, 7)
	if _, err := io.ReadFull(br, head); err != nil {
		return nil, fmt.Errorf("%w: header: %w", errRDS, err)
	}
	if string(head[:4]) != "RDX2" && string(head[:4]) != "RDX3" || string(head[4:]) != "\nX\n" {
		return nil, fmt.Errorf("%w: header %q, want RDX2/RDX3 XDR", errRDS, head)
	}
	rr := &rReader{r: br}
	version := rr.int()
	rr.int() // writer's R version
	rr.int() // minimal reader version
	if version == 3 {
		n := rr.int()
		if _, err := io.ReadFull(br, make([]byte, n)); err != nil { // native encoding name
			return nil, fmt.Errorf("%w: %w", errRDS, err)
		}
	}
	top, err := rr.item()
	if err != nil {
		return nil, err
	}
	if top.typ != rLIST {
		return nil, fmt.Errorf("%w: top level is type %d, want a pairlist", errRDS, top.typ)
	}
	out := map[string]*rObj{}
	for i, t := range top.tags {
		out[t] = top.elems[i]
	}
	return out, nil
}

func (rr *rReader) int() int32 {
	var b [4]byte
	if _, err := io.ReadFull(rr.r, b[:]); err != nil {
		panic(fmt.Errorf("%w: truncated: %w", errRDS, err))
	}
	return int32(binary.BigEndian.Uint32(b[:]))
}

func (rr *rReader) length() int {
	n := rr.int()
	if n == -1 { // long vector: two more ints
		hi, lo := rr.int(), rr.int()
		return int(int64(hi)<<32 | int64(uint32(lo)))
	}
	if n < 0 || n > 1<<28 {
		panic(fmt.Errorf("%w: length %d", errRDS, n))
	}
	return int(n)
}

// item reads one object; panics inside are turned into errors here.
func (rr *rReader) item() (o *rObj, err error) {
	defer func() {
		if p := recover(); p != nil {
			e, ok := p.(error)
			if !ok || !errors.Is(e, errRDS) {
				panic(p)
			}
			o, err = nil, e
		}
	}()
	return rr.read(), nil
}

func (rr *rReader) read() *rObj {
	if rr.n++; rr.n > 1<<22 {
		panic(fmt.Errorf("%w: too many objects", errRDS))
	}
	flags := uint32(rr.int())
	typ := int(flags & 0xff)
	hasAttr, hasTag := flags&(1<<9) != 0, flags&(1<<10) != 0
	switch typ {
	case rNILVAL, rGLOBAL, rEMPTY, rMissing, rBASEENV:
		return &rObj{typ: rNIL}
	case rREF:
		i := int(flags>>8) - 1
		if i < 0 {
			i = int(rr.int()) - 1
		}
		if i < 0 || i >= len(rr.refs) {
			panic(fmt.Errorf("%w: reference %d of %d", errRDS, i+1, len(rr.refs)))
		}
		return rr.refs[i]
	case rSYM:
		name := rr.read() // CHARSXP
		o := &rObj{typ: rSYM, sym: name.sym}
		rr.refs = append(rr.refs, o)
		return o
	case rCHAR:
		n := rr.int()
		if n == -1 {
			return &rObj{typ: rCHAR, sym: "NA"}
		}
		if n < 0 || n > 1<<24 {
			panic(fmt.Errorf("%w: string length %d", errRDS, n))
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(rr.r, b); err != nil {
			panic(fmt.Errorf("%w: %w", errRDS, err))
		}
		return &rObj{typ: rCHAR, sym: string(b)}
	case rLIST:
		o := &rObj{typ: rLIST}
		// A pairlist is read cell by cell: attributes, tag, value, rest.
		for {
			var attr *rObj
			if hasAttr {
				attr = rr.read()
			}
			tag := ""
			if hasTag {
				tag = rr.read().sym
			}
			o.tags = append(o.tags, tag)
			o.elems = append(o.elems, rr.read())
			_ = attr
			next := uint32(rr.int())
			if next&0xff != rLIST {
				if next&0xff != rNILVAL {
					panic(fmt.Errorf("%w: pairlist ends in type %d", errRDS, next&0xff))
				}
				return o
			}
			hasAttr, hasTag = next&(1<<9) != 0, next&(1<<10) != 0
		}
	}
	o := &rObj{typ: typ}
	switch typ {
	case rREAL:
		n := rr.length()
		o.reals = make([]float64, n)
		var b [8]byte
		for i := range o.reals {
			if _, err := io.ReadFull(rr.r, b[:]); err != nil {
				panic(fmt.Errorf("%w: %w", errRDS, err))
			}
			o.reals[i] = math.Float64frombits(binary.BigEndian.Uint64(b[:]))
		}
	case rINT, rLGL:
		n := rr.length()
		o.ints = make([]int32, n)
		for i := range o.ints {
			o.ints[i] = rr.int()
		}
	case rSTR:
		n := rr.length()
		o.strs = make([]string, n)
		for i := range o.strs {
			o.strs[i] = rr.read().sym
		}
	case rVEC:
		n := rr.length()
		o.elems = make([]*rObj, n)
		for i := range o.elems {
			o.elems[i] = rr.read()
		}
	default:
		panic(fmt.Errorf("%w: unsupported SEXP type %d", errRDS, typ))
	}
	if hasAttr {
		a := rr.read()
		o.attr = map[string]*rObj{}
		for i, t := range a.tags {
			o.attr[t] = a.elems[i]
		}
	}
	return o
}
