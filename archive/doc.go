// Package archive is the on-disk form of an archived day of history (SPEC
// §4 "Archive"): under a directory, one directory per day, named by the
// day's partition suffix (pYYYYMMDD, or legacy), holding the rows of its
// four partitions as gzip-compressed NDJSON — events.ndjson.gz,
// deliveries.ndjson.gz, attempts.ndjson.gz, dead_letters.ndjson.gz, one
// JSON object a line — and manifest.json, which names the day and, for
// each file, its rows, bytes and SHA-256.
//
// A day is written into a temporary directory and renamed into place once
// its manifest is written and everything is synced, so a day directory
// that exists is complete. Reading needs only the directory: no database.
// It imports only the standard library.
package archive
