package main

import (
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tc := range tests {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestRowText(t *testing.T) {
	tests := []struct {
		r           row
		value, rate string
	}{
		{row{unit: unitDur, value: 0.00042}, "420 µs", "—"},
		{row{unit: unitDur, value: 0.0125, base: 0.0025}, "12.50 ms", "5.00×"},
		{row{unit: unitRate, value: 1000, base: 4000}, "1000 req/s", "0.25×"},
		{row{unit: unitBytes, value: 3 << 20}, "3.0 MiB", "—"},
		{row{unit: unitRatio, value: 0.875}, "0.88×", "—"},
	}
	for _, tc := range tests {
		if got := tc.r.valueText(); got != tc.value {
			t.Errorf("valueText = %q, want %q", got, tc.value)
		}
		if got := tc.r.ratioText(); got != tc.rate {
			t.Errorf("ratioText = %q, want %q", got, tc.rate)
		}
	}
}

func TestParseOptions(t *testing.T) {
	var sb strings.Builder
	o, err := parseOptions([]string{"--quick", "--only", "closed,outage"}, &sb)
	if err != nil {
		t.Fatal(err)
	}
	if o.rounds != 1 || !o.want("outage") || o.want("memory") {
		t.Fatalf("quick options = %+v", o)
	}
	if _, err := parseOptions([]string{"extra"}, &sb); err == nil {
		t.Fatal("a stray argument was accepted")
	}
}
