package outbox

import (
	"fmt"
	"slices"
	"testing"
)

func TestWaves(t *testing.T) {
	rec := func(seq int64, key string) Record {
		return Record{Seq: seq, Message: Message{ID: fmt.Sprint(seq), OrderingKey: key}}
	}
	in := []Record{rec(1, "A"), rec(2, ""), rec(3, "A"), rec(4, "B"), rec(5, "A"), rec(6, ""), rec(7, "B")}
	var got [][]int64
	for _, w := range waves(in) {
		var s []int64
		for _, r := range w {
			s = append(s, r.Seq)
		}
		got = append(got, s)
	}
	want := [][]int64{{1, 2, 4, 6}, {3, 7}, {5}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("waves %v, want %v", got, want)
	}
	if w := waves(nil); len(w) != 0 {
		t.Fatalf("waves of nothing: %v", w)
	}
	blocked := unblocked(in, map[string]bool{"A": true})
	var left []int64
	for _, r := range blocked {
		left = append(left, r.Seq)
	}
	if !slices.Equal(left, []int64{2, 4, 6, 7}) || len(in) != 7 || in[0].Seq != 1 {
		t.Fatalf("unblocked: %v (input %v)", left, in)
	}
}
