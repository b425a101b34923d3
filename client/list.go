package client

import (
	"context"
	"iter"
	"net/url"
	"strconv"
	"time"
)

// page is one page of a list.
type page[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
}

// list yields every item of a list route, following next_cursor page by
// page. It stops at the first error, which it yields with a zero item.
func list[T any](ctx context.Context, c *Client, path string, q url.Values) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		q := cloneValues(q)
		for {
			var p page[T]
			r := newRequest("GET", path, nil)
			r.query = q
			if err := c.do(ctx, r, &p); err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, v := range p.Data {
				if !yield(v, nil) {
					return
				}
			}
			if p.NextCursor == nil || *p.NextCursor == "" {
				return
			}
			q = cloneValues(q)
			q.Set("cursor", *p.NextCursor)
		}
	}
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// setQuery sets q[name] unless v is empty.
func setQuery(q url.Values, name, v string) {
	if v != "" {
		q.Set(name, v)
	}
}

func setTime(q url.Values, name string, t time.Time) {
	if !t.IsZero() {
		q.Set(name, t.UTC().Format(timeLayout))
	}
}

func setLimit(q url.Values, n int) {
	if n > 0 {
		q.Set("limit", strconv.Itoa(n))
	}
}
