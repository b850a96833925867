package rollout

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDurationString(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{4 * time.Hour, "4h"},
		{90 * time.Second, "1m30s"},
		{time.Hour + 30*time.Minute, "1h30m"},
		{26*time.Hour + 5*time.Second, "26h5s"},
		{1500 * time.Millisecond, "1.5s"},
		{-time.Minute, "-1m0s"},
	}
	for _, tt := range tests {
		if got := Duration(tt.d).String(); got != tt.want {
			t.Errorf("Duration(%v).String() = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestDurationJSON(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Duration
		wantErr bool
	}{
		{name: "hours", in: `"4h"`, want: Duration(4 * time.Hour)},
		{name: "seconds", in: `"90s"`, want: Duration(90 * time.Second)},
		{name: "mixed", in: `"1h30m"`, want: Duration(90 * time.Minute)},
		{name: "spaces", in: `" 5m "`, want: Duration(5 * time.Minute)},
		{name: "number refused", in: `90`, wantErr: true},
		{name: "no unit", in: `"90"`, wantErr: true},
		{name: "garbage", in: `"soon"`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Duration
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
			var back Duration
			if err := json.Unmarshal(b, &back); err != nil || back != got {
				t.Errorf("round trip %s → %s → %v (%v)", tt.in, b, back, err)
			}
		})
	}
	b, err := json.Marshal(struct {
		D Duration `json:"d"`
	}{Duration(4 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(`{"d":"4h"}`, string(b)); diff != "" {
		t.Errorf("Marshal (-want +got):\n%s", diff)
	}
}
