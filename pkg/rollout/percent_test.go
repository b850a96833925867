package rollout

import (
	"encoding/json"
	"testing"
)

func TestPercentJSON(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Percent
		out     string
		wantErr bool
	}{
		{name: "whole", in: `"20%"`, want: 20, out: `"20%"`},
		{name: "decimal", in: `"2.5%"`, want: 2.5, out: `"2.5%"`},
		{name: "spaces", in: `" 5 % "`, want: 5, out: `"5%"`},
		{name: "hundred", in: `"100%"`, want: 100, out: `"100%"`},
		{name: "no sign", in: `"20"`, wantErr: true},
		{name: "number", in: `20`, wantErr: true},
		{name: "fraction number", in: `0.2`, wantErr: true},
		{name: "not a number", in: `"many%"`, wantErr: true},
		{name: "nan", in: `"NaN%"`, wantErr: true},
		{name: "inf", in: `"Inf%"`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Percent
			err := json.Unmarshal([]byte(tt.in), &got)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Unmarshal(%s) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got != tt.want {
				t.Errorf("Unmarshal(%s) = %v, want %v", tt.in, got, tt.want)
			}
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.out {
				t.Errorf("Marshal(%v) = %s, want %s", got, b, tt.out)
			}
		})
	}
}

func TestPercentOf(t *testing.T) {
	tests := []struct {
		p    Percent
		n    int
		want float64
	}{
		{5, 100, 5},
		{20, 1000, 200},
		{20, 37, 7.4},
		{33, 3, 0.99},
		{100, 7, 7},
		{0, 50, 0},
	}
	for _, tt := range tests {
		if got := tt.p.Of(tt.n); got != tt.want {
			t.Errorf("%v.Of(%d) = %v, want %v", tt.p, tt.n, got, tt.want)
		}
	}
	if got := Percent(20).Fraction(); got != 0.2 {
		t.Errorf("Fraction() = %v, want 0.2", got)
	}
}
