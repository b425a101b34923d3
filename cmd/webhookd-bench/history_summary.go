package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// historySummary is what a database holds after the generator ran: rows
// and sizes of each history table (its partitions summed, once it has
// them), and how long the generator took.
type historySummary struct {
	Tables  []historyTable
	Written int64         // deliveries written by this run
	Elapsed time.Duration // how long writing them took (ANALYZE not counted)
}

type historyTable struct {
	Name                string
	Rows                int64
	Table, Index, Total int64 // pg_table_size, pg_indexes_size, pg_total_relation_size
}

// summarizeHistory counts the rows of the history tables and measures
// their sizes.
func summarizeHistory(ctx context.Context, pool *pgxpool.Pool) (*historySummary, error) {
	sum := &historySummary{}
	for _, name := range []string{"events", "deliveries", "attempts", "dead_letters"} {
		t := historyTable{Name: name}
		// name is one of ours, so it needs no quoting.
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+name+`),
			coalesce(sum(pg_table_size(relid)), 0)::bigint, coalesce(sum(pg_indexes_size(relid)), 0)::bigint,
			coalesce(sum(pg_total_relation_size(relid)), 0)::bigint
			FROM (`+leavesOf("$1::regclass")+`) t`, name).Scan(&t.Rows, &t.Table, &t.Index, &t.Total)
		if err != nil {
			return nil, fmt.Errorf("size of %s: %w", name, err)
		}
		sum.Tables = append(sum.Tables, t)
	}
	return sum, nil
}

// Print writes the summary as a Markdown table.
func (s *historySummary) Print(w io.Writer) {
	if s.Written > 0 {
		fmt.Fprintf(w, "Wrote %d deliveries in %s (%.0f deliveries/s).\n\n", s.Written, s.Elapsed.Round(time.Millisecond),
			float64(s.Written)/s.Elapsed.Seconds())
	}
	fmt.Fprintln(w, "| table | rows | table | indexes | total |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	var total historyTable
	for _, t := range s.Tables {
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s |\n", t.Name, t.Rows, mib(t.Table), mib(t.Index), mib(t.Total))
		total.Table, total.Index, total.Total = total.Table+t.Table, total.Index+t.Index, total.Total+t.Total
	}
	fmt.Fprintf(w, "| all | | %s | %s | %s |\n", mib(total.Table), mib(total.Index), mib(total.Total))
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
