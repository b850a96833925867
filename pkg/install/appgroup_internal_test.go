//go:build linux

package install

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseStat(t *testing.T) {
	// Fields 23 on are cut; starttime (field 22) is 1834567.
	const tail = " 0 -1 4194560 130 0 0 0 0 0 0 0 20 0 1 0 1834567 2764800 208"
	cases := []struct {
		name    string
		stat    string
		want    procInfo
		wantErr bool
	}{
		{name: "plain", stat: "4242 (app) S 1 4242 4100" + tail, want: procInfo{PID: 4242, State: 'S', PGID: 4242, SID: 4100, StartTime: 1834567}},
		// A command name may hold spaces and parentheses: fields count
		// from the last ')'.
		{name: "hostile comm", stat: "4242 (a) Z 9 9 9 (b c) Z 1 4242 4100" + tail, want: procInfo{PID: 4242, State: 'Z', PGID: 4242, SID: 4100, StartTime: 1834567}},
		{name: "too short", stat: "4242 (app) S 1 4242 4100 0", wantErr: true},
		{name: "no comm", stat: "4242 app S 1 4242 4100" + tail, wantErr: true},
		{name: "bad pid", stat: "x (app) S 1 4242 4100" + tail, wantErr: true},
		{name: "not a number", stat: "4242 (app) S 1 x 4100" + tail, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStat([]byte(tc.stat))
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseStat: %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("parseStat (-want +got):\n%s", diff)
			}
		})
	}
}
