package controller

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fleetwave/fleetwave/pkg/kv"
)

// TestSettleLog: while the bus settles, the first failed attempt is logged
// at once, then at most one line per interval, each naming what is being
// ensured and why it failed, and counting the attempts it did not log.
func TestSettleLog(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	t0 := time.Unix(1000, 0)
	now := t0
	s := &settleLog{log: slog.New(slog.NewJSONHandler(&buf, nil)), every: 5 * time.Second, now: func() time.Time { return now }}
	noAnswer := errors.New("no answer from the JetStream cluster")
	for _, f := range []struct {
		at      time.Duration
		what    string
		attempt int
	}{
		{0, "stream FLEET_HB", 1},
		{time.Second, "stream FLEET_HB", 2},
		{4900 * time.Millisecond, "stream FLEET_HB", 3},
		{5 * time.Second, "stream FLEET_HB", 4},
		{6 * time.Second, "bucket fleet_plan", 1},
		{11 * time.Second, "bucket fleet_plan", 2},
	} {
		now = t0.Add(f.at)
		s.retrying(kv.Retrying{What: f.what, Attempt: f.attempt, Err: noAnswer, Delay: 250 * time.Millisecond})
	}
	s.ready()

	type line struct {
		Level    string `json:"level"`
		Msg      string `json:"msg"`
		Ensuring string `json:"ensuring"`
		Err      string `json:"err"`
		Attempt  int    `json:"attempt"`
		Quiet    int    `json:"failures_since_last_line"`
		Failed   int    `json:"failed_attempts"`
	}
	var got []line
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var v line
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		got = append(got, v)
	}
	const waiting = "waiting for the NATS JetStream bus to accept the stream and buckets; retrying"
	want := []line{
		{Level: "WARN", Msg: waiting, Ensuring: "stream FLEET_HB", Err: noAnswer.Error(), Attempt: 1},
		{Level: "WARN", Msg: waiting, Ensuring: "stream FLEET_HB", Err: noAnswer.Error(), Attempt: 4, Quiet: 2},
		{Level: "WARN", Msg: waiting, Ensuring: "bucket fleet_plan", Err: noAnswer.Error(), Attempt: 2, Quiet: 1},
		{Level: "INFO", Msg: "stream and buckets ready", Failed: 6},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}
}

// TestSettleLogQuietWithoutRetries: a bus that accepts the first attempt
// costs no log line.
func TestSettleLogQuietWithoutRetries(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	s := &settleLog{log: slog.New(slog.NewJSONHandler(&buf, nil)), every: time.Second, now: time.Now}
	s.ready()
	if buf.Len() != 0 {
		t.Errorf("logged %q", buf.String())
	}
}

// TestSettleLogSwitchesServer: a server that keeps answering "JetStream not
// enabled for account" (as the server sends it: an API error with code
// 10039) makes the controller try another server after notEnabledSwitch
// answers in a row; any other error resets the count, and a switch that
// could not happen (one server only) is tried again on the next answer.
func TestSettleLogSwitchesServer(t *testing.T) {
	t.Parallel()
	notEnabled := &jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabledForAccount, Description: "JetStream not enabled for account"}
	other := errors.New("no answer from the JetStream cluster")
	switched, can := 0, true
	s := &settleLog{log: slog.New(slog.NewJSONHandler(&bytes.Buffer{}, nil)), every: time.Second, now: time.Now,
		switchServer: func() bool {
			if can {
				switched++
			}
			return can
		}}
	for i, step := range []struct {
		err  error
		can  bool
		want int
	}{
		{notEnabled, true, 0}, {notEnabled, true, 0}, {other, true, 0}, // reset before the third
		{notEnabled, true, 0}, {notEnabled, true, 0}, {notEnabled, true, 1},
		{notEnabled, true, 1}, {notEnabled, true, 1}, {notEnabled, false, 1}, // count starts again after a switch
		{notEnabled, false, 1}, {notEnabled, true, 2}, // not switched: tried on every further answer
	} {
		can = step.can
		s.retrying(kv.Retrying{What: "stream FLEET_HB", Attempt: i + 1, Err: fmt.Errorf("ensure: %w", step.err), Delay: time.Millisecond})
		if switched != step.want {
			t.Fatalf("after answer %d (%v): switched %d times, want %d", i+1, step.err, switched, step.want)
		}
	}
}
