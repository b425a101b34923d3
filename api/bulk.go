package api

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/storage"
)

// bulkPath is the route of bulk jobs. It is served outside the request
// bound (timeout.go), which reads a whole body before its handler runs.
const bulkPath = "/v1/events/bulk"

// Limits of a bulk chunk: the lines stored in one row of bulk_chunks, and
// accepted by the job runner in one transaction.
const (
	bulkChunkLines = 1000
	bulkChunkBytes = 1 << 20
)

// bulk serves POST /v1/events/bulk (SPEC §2 "Bulk jobs"): an NDJSON body,
// one event per line, streamed into PostgreSQL a chunk at a time
// (storage.BulkUpload) and checked as it goes: a line that is not UTF-8 or
// not JSON is 400 invalid_json naming the line; a body over MaxBulkBytes,
// over MaxBulkEvents lines, or with a line over MaxPayloadBytes is 413
// payload_too_large; either way nothing is stored. Lines of only white
// space are skipped (their numbers still count). The event shape and the
// catalog's schemas are the job runner's to check, line by line. Once the
// whole body is stored the job is created, queued, with the key's record,
// and the answer is 202 {"job_id"} with Location /v1/jobs/{id}; the job is
// enqueued after the commit (or found queued by the reconciler).
//
// The key's fingerprint covers the whole body, known only at its end: a
// repeat is answered then. A 400 is remembered for the key once the rest
// of the body is read; a 413 is not (the body was not read), as on the
// other routes.
func (s *Server) bulk(w http.ResponseWriter, r *http.Request, c *call) {
	s.work.Add(1)
	defer s.work.Done()
	key, ok := s.checkIdempotencyKey(w, c)
	if !ok {
		return
	}
	limit := s.cfg.MaxBulkBytes
	if r.ContentLength > limit {
		s.fail(w, c, bulkTooLarge("request body is larger than %d bytes", limit))
		return
	}
	fp := sha256.New()
	io.WriteString(fp, r.Method+" "+r.URL.Path+"\n")
	body := bufio.NewReaderSize(io.TeeReader(http.MaxBytesReader(w, r.Body, limit), fp), 64<<10)
	now := s.clock.Now()
	up := s.db.NewBulkUpload(c.project.ID, now)
	defer up.Rollback(c.ctx)
	events, err := s.storeBulk(c, body, up)
	if err == nil && events == 0 {
		err = webhookd.Invalid("body", "must hold at least one event (one JSON object per line)")
	}
	if err != nil {
		if webhookd.ErrorCode(err) == webhookd.CodePayloadTooLarge || webhookd.ErrorCode(err) == webhookd.CodeInternal {
			s.fail(w, c, err)
			return
		}
		up.Rollback(c.ctx)
		// The rest of the body, for the fingerprint of the key's record.
		if _, drainErr := io.Copy(io.Discard, body); drainErr != nil {
			s.fail(w, c, readError(drainErr, limit))
			return
		}
		ik := s.bulkKey(c, key, fp.Sum(nil))
		status, out := errorResponse(appError(err), c.requestID)
		resp, replayed, err := s.db.WithIdempotency(c.ctx, ik, now, s.cfg.IdempotencyWait,
			func(*storage.Store) (storage.StoredResponse, error) {
				return storage.StoredResponse{StatusCode: status, ContentType: "application/json", Body: out}, nil
			})
		if err != nil {
			s.failIdempotent(w, c, err)
			return
		}
		s.writeStored(w, c, resp, replayed)
		return
	}
	var jobID string
	resp, replayed, err := up.Commit(c.ctx, s.bulkKey(c, key, fp.Sum(nil)), events, s.cfg.IdempotencyWait,
		func(id string) (storage.StoredResponse, error) {
			jobID = id
			out, err := marshalJSON(jobCreatedJSON{JobID: id})
			return storage.StoredResponse{StatusCode: http.StatusAccepted, ContentType: "application/json", Body: out}, err
		})
	if err != nil {
		s.failIdempotent(w, c, err)
		return
	}
	if replayed {
		var created jobCreatedJSON
		if json.Unmarshal(resp.Body, &created) == nil {
			jobID = created.JobID
		}
	} else {
		c.afterCommit = s.enqueueJobAfterCommit(jobID)
	}
	if resp.StatusCode == http.StatusAccepted && jobID != "" {
		w.Header().Set("Location", "/v1/jobs/"+jobID)
	}
	s.writeStored(w, c, resp, replayed)
}

// bulkKey is the Idempotency-Key of a bulk request whose body's
// fingerprint is sum.
func (s *Server) bulkKey(c *call, key string, sum []byte) storage.IdempotencyKey {
	credential, _ := bearerToken(c.r)
	ik := storage.IdempotencyKey{ProjectID: c.project.ID, Key: key, TTL: c.project.IdempotencyTTL, Credential: credential}
	copy(ik.Fingerprint[:], sum)
	return ik
}

// storeBulk reads body line by line, checks each line and stores them in
// chunks through up; it returns the events (lines not blank) stored.
func (s *Server) storeBulk(c *call, body *bufio.Reader, up *storage.BulkUpload) (events int, err error) {
	var (
		chunk     []byte
		first     = 1 // the number of the chunk's first line
		lines     int // the lines in chunk
		lineNo    int
		maxLine   = s.cfg.MaxPayloadBytes
		maxEvents = s.cfg.MaxBulkEvents
	)
	flush := func() error {
		if lines == 0 {
			return nil
		}
		if err := up.AddChunk(c.ctx, first, lines, chunk); err != nil {
			return err
		}
		first, lines, chunk = first+lines, 0, chunk[:0]
		return nil
	}
	for {
		start := len(chunk)
		var readErr error
		chunk, readErr = readLine(body, chunk, maxLine)
		line := chunk[start:]
		if len(line) == 0 && readErr == io.EOF {
			return events, flush()
		}
		lineNo++
		switch {
		case errors.Is(readErr, errLineTooLong):
			return events, bulkTooLarge("line %d is longer than %d bytes", lineNo, maxLine)
		case readErr != nil && readErr != io.EOF:
			return events, readError(readErr, s.cfg.MaxBulkBytes)
		}
		if line[len(line)-1] != '\n' { // the last line, unended
			chunk = append(chunk, '\n')
			line = chunk[start:]
		}
		text := line[:len(line)-1]
		if len(bytes.TrimSpace(text)) > 0 {
			if !utf8.Valid(text) {
				return events, &webhookd.Error{Code: webhookd.CodeInvalidJSON, Message: fmt.Sprintf("line %d is not valid UTF-8", lineNo)}
			}
			if !json.Valid(text) {
				return events, &webhookd.Error{Code: webhookd.CodeInvalidJSON, Message: fmt.Sprintf("line %d is not JSON", lineNo)}
			}
			if events++; events > maxEvents {
				return events, bulkTooLarge("the body holds more than %d events", maxEvents)
			}
		}
		lines++
		if lines >= bulkChunkLines || len(chunk) >= bulkChunkBytes {
			if err := flush(); err != nil {
				return events, err
			}
		}
		if readErr == io.EOF {
			return events, flush()
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine appends the next line of r, with its "\n" when it has one, to
// buf. A line longer than max (its "\n" aside) is errLineTooLong; the end
// of r is io.EOF, with or without a last line.
func readLine(r *bufio.Reader, buf []byte, max int64) ([]byte, error) {
	start := len(buf)
	for {
		frag, err := r.ReadSlice('\n')
		buf = append(buf, frag...)
		n := int64(len(buf) - start)
		if n > 0 && buf[len(buf)-1] == '\n' {
			n--
		}
		if n > max {
			return buf, errLineTooLong
		}
		if err != bufio.ErrBufferFull {
			return buf, err
		}
	}
}

// readError is the client error of a body that could not be read.
func readError(err error, limit int64) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return bulkTooLarge("request body is larger than %d bytes", limit)
	}
	return &webhookd.Error{Code: webhookd.CodeInvalidJSON, Message: "could not read the request body"}
}

func bulkTooLarge(format string, args ...any) error {
	return &webhookd.Error{Code: webhookd.CodePayloadTooLarge, Message: fmt.Sprintf(format, args...)}
}
