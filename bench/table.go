package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one line of the result table: the median of a figure over the
// rounds, and the same-run figure for direct access it is compared with.
type row struct {
	section, target, figure string
	unit                    unit
	value                   float64
	base                    float64 // direct's figure; 0 = no ratio
	goal                    string
	met                     string // "yes", "no" or "" (no target)
}

// unit says how a value is printed.
type unit int

const (
	unitRate  unit = iota // requests per second
	unitDur               // seconds, printed as ms/µs/s
	unitMBps              // megabytes (10^6) per second
	unitBytes             // bytes, printed as MiB
	unitCount             // plain count
	unitRatio             // one figure divided by another, printed as 1.23×
)

func (r row) valueText() string { return format(r.unit, r.value) }

func format(u unit, v float64) string {
	switch u {
	case unitRate:
		return fmt.Sprintf("%.0f req/s", v)
	case unitDur:
		d := time.Duration(v * float64(time.Second))
		switch {
		case d < time.Millisecond:
			return fmt.Sprintf("%.0f µs", v*1e6)
		case d < time.Second:
			return fmt.Sprintf("%.2f ms", v*1e3)
		}
		return fmt.Sprintf("%.2f s", v)
	case unitMBps:
		return fmt.Sprintf("%.0f MB/s", v)
	case unitBytes:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case unitRatio:
		return fmt.Sprintf("%.2f×", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func (r row) ratioText() string {
	if r.base == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", r.value/r.base)
}

// printTable writes the rows as an aligned table (Markdown-compatible).
func printTable(w io.Writer, rows []row) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| section\t target\t figure\t median\t vs direct\t target\t met\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---:\t---:\t---\t---\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "| %s\t %s\t %s\t %s\t %s\t %s\t %s\t\n", r.section, r.target, r.figure,
			r.valueText(), r.ratioText(), dash(r.goal), dash(r.met))
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// verdict turns a comparison into the table's "met" column.
func verdict(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// median of the rounds' values (mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// series collects one figure per round for several named targets.
type series map[string][]float64

func (s series) add(name string, v float64) { s[name] = append(s[name], v) }
func (s series) med(name string) float64    { return median(s[name]) }

// summary renders the per-round values behind a median, for the log.
func (s series) summary(name string, u unit) string {
	parts := make([]string, 0, len(s[name]))
	for _, v := range s[name] {
		parts = append(parts, format(u, v))
	}
	return strings.Join(parts, ", ")
}
