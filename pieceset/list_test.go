package pieceset

import (
	"errors"
	"slices"
	"testing"
)

func TestFormatList(t *testing.T) {
	tests := []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{5}, "5"},
		{[]int{0, 1, 2, 5, 9, 10}, "0-2,5,9-10"},
		{[]int{1, 3}, "1,3"},
	}
	for _, tt := range tests {
		if got := FormatList(tt.in); got != tt.want {
			t.Errorf("FormatList(%v) = %q, want %q", tt.in, got, tt.want)
		}
		if tt.in == nil {
			continue
		}
		back, err := ParseList(tt.want, 11, 100)
		if err != nil || !slices.Equal(back, tt.in) {
			t.Errorf("ParseList(%q) = %v, %v; want %v", tt.want, back, err, tt.in)
		}
	}
}

func TestParseList(t *testing.T) {
	good := []struct {
		in   string
		want []int
	}{
		{"3", []int{3}},
		{"1,3-5, 9", []int{1, 3, 4, 5, 9}},
		{"0-0", []int{0}},
		{"  7 ,8 ", []int{7, 8}},
	}
	for _, tt := range good {
		if got, err := ParseList(tt.in, 10, 100); err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseList(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "3,x", "5-3", "9-10", "-1", "1,,2", "0-9999999", "1-2-3", "+1", "1-"} {
		if got, err := ParseList(in, 10, 100); !errors.Is(err, ErrBadList) {
			t.Errorf("ParseList(%q) = %v, %v; want ErrBadList", in, got, err)
		}
	}
	if got, err := ParseList("0-99999", 1<<20, 256); err != nil || len(got) != 256 {
		t.Errorf("a huge range gave %d indexes, %v; want the first 256", len(got), err)
	}
}
