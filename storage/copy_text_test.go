package storage

import (
	"bytes"
	"testing"
)

// TestCopyTextDecoderAcrossWrites: COPY's text escapes are undone however
// its output is cut into writes, an escape split between two included.
func TestCopyTextDecoderAcrossWrites(t *testing.T) {
	in := []byte(`{"s":"back\\\\slash \\"q\\" tab\\\\t"}` + "\n" + `{"b":"\t"}` + "\n")
	in = append(in, []byte(`x\ty\nz`)...)
	want := []byte(`{"s":"back\\slash \"q\" tab\\t"}` + "\n" + `{"b":"` + "\t" + `"}` + "\n" + "x\ty\nz")
	// The input above spells its escapes as COPY does: a backslash
	// doubled, and \t, \n for the raw characters.
	in = bytes.ReplaceAll(in, []byte("\t"), []byte(`\t`))
	for cut := range len(in) + 1 {
		var out bytes.Buffer
		d := &copyTextDecoder{w: &out}
		d.Write(in[:cut])
		d.Write(in[cut:])
		if !bytes.Equal(out.Bytes(), want) || d.escape {
			t.Fatalf("cut at %d: %q, want %q", cut, out.Bytes(), want)
		}
	}
}
