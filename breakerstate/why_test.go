package breakerstate

import "testing"

func TestTransitionWhy(t *testing.T) {
	c, o, h := Closed, Open, HalfOpen
	for _, tc := range []struct {
		tr   Transition
		want string
	}{
		{Transition{From: c, To: o}, "threshold reached"},
		{Transition{From: c, To: o, Silent: true}, "no headers within suspect_after"},
		{Transition{From: h, To: o}, "probe failed"},
		{Transition{From: h, To: c}, "probe succeeded"},
		{Transition{From: o, To: h}, "probe due"},
		{Transition{From: o, To: c}, "success of a request admitted before the opening"},
		{Transition{From: c, To: o, Manual: true}, "forced"},
		{Transition{From: o, To: c, Manual: true}, "forced"},
		{Transition{From: c, To: o, Remote: true}, "fleet"},
		{Transition{From: c, To: h}, "closed → half_open"},
	} {
		if got := tc.tr.Why(); got != tc.want {
			t.Errorf("%v → %v manual=%v remote=%v: %q, want %q", tc.tr.From, tc.tr.To, tc.tr.Manual, tc.tr.Remote, got, tc.want)
		}
	}
}
