package api

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzReadLine holds the bulk route's line reader to bytes.SplitAfter, the
// specification: the same lines, each with its "\n" when it has one, read
// through a buffer smaller than a line; and errLineTooLong exactly at the
// first line whose text (its "\n" aside) is longer than max.
func FuzzReadLine(f *testing.F) {
	for _, seed := range []string{"", "\n", "a\nbb\n", "abc", "{\"type\":\"a\"}\n\n  \nx", "0123456789abcdefghij\nk"} {
		f.Add([]byte(seed), uint8(5))
	}
	f.Fuzz(func(t *testing.T, body []byte, max uint8) {
		want := bytes.SplitAfter(body, []byte("\n"))
		if len(want[len(want)-1]) == 0 {
			want = want[:len(want)-1]
		}
		r := bufio.NewReaderSize(bytes.NewReader(body), 16)
		for i := 0; ; i++ {
			line, err := readLine(r, nil, int64(max))
			if errors.Is(err, errLineTooLong) {
				if i >= len(want) || int64(len(bytes.TrimSuffix(want[i], []byte("\n")))) <= int64(max) {
					t.Fatalf("line %d refused as too long (max %d) in %q", i+1, max, body)
				}
				return
			}
			if i == len(want) {
				if len(line) != 0 || err != io.EOF {
					t.Fatalf("after the last line: %q, %v", line, err)
				}
				return
			}
			if !bytes.Equal(line, want[i]) {
				t.Fatalf("line %d: %q, want %q", i+1, line, want[i])
			}
			if int64(len(bytes.TrimSuffix(line, []byte("\n")))) > int64(max) {
				t.Fatalf("line %d of %d bytes passed max %d", i+1, len(line), max)
			}
			if err != nil && err != io.EOF {
				t.Fatal(err)
			}
			if err == io.EOF {
				if i != len(want)-1 {
					t.Fatalf("EOF at line %d of %d", i+1, len(want))
				}
				return
			}
		}
	})
}
