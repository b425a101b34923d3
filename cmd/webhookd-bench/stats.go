package main

import (
	"math"
	"slices"
)

// nan marks a figure that could not be measured ("n/a" in the report).
var nan = math.NaN()

// percentile is the nearest-rank percentile p (0..1) of sorted values, or
// NaN when there are none.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return nan
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// median is the median of the values that are not NaN, or NaN when none
// is; with an even count it is the mean of the middle two.
func median(values []float64) float64 {
	var v []float64
	for _, x := range values {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return nan
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
