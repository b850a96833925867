package rollout

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestClipText(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "abc…"},
		{"aéb", 2, "a…"}, // never half of é
		{"ééé", 3, "é…"},
		{"abc", 0, ""},
		{"", 0, ""},
	} {
		if got := ClipText(tc.s, tc.n); got != tc.want {
			t.Errorf("ClipText(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

// worstStatus is a status as large as a valid config lets the structured
// part of a status be (every list at its bound, every version, name and
// query at its longest), with the free text given.
func worstStatus(t *testing.T, text string) GroupStatus {
	t.Helper()
	version := func(i int) string {
		v := fmt.Sprintf("%d.0.0-", i)
		return v + strings.Repeat("a", MaxVersionLen-len(v))
	}
	group := strings.Repeat("g", MaxGroupNameLen)
	st := newStatus(group, Spec{StartVersion: version(1), TargetVersion: version(2)}, time.Now().UTC(), text)
	st.State, st.HoldVersion = StateCanary, version(3)
	st.HaltReason, st.Waiting, st.Frozen, st.Held = text, text, text, text
	for i := range MaxRejected {
		st.RejectedVersions = append(st.RejectedVersions, version(10+i))
	}
	ids := spreadIDs(MaxRetryAgents, 0.001)
	for _, id := range ids[:10] {
		st.Canaries = append(st.Canaries, Canary{ID: id, HealthySince: st.Since, MissingSince: st.Since})
	}
	st.Retry = RetryRequest{Token: strings.Repeat("t", 64), Agents: ids, At: st.Since, Note: text}
	for range MaxApprovals {
		st.Approvals = append(st.Approvals, Approval{Stage: ApprovalStart, By: text, Reason: text, At: st.Since})
	}
	st.AwaitingApproval = ApprovalWait{Stage: ApprovalAfterCanary, Since: st.Since}
	// The queries as long as Config.Validate lets them be.
	var checks []Check
	for i := range MaxChecks {
		c := goodCheck(fmt.Sprintf("%s-%02d", strings.Repeat("c", maxCheckNameLen-3), i))
		c.Query = longQuery(MaxGroupQueryBytes / MaxChecks)
		c.Success, c.Failure = "<= -123456789.123456789", ">= 123456789.123456789"
		checks = append(checks, c)
	}
	if n := queryBytes(group, checks); n > MaxGroupQueryBytes || n < MaxGroupQueryBytes*9/10 {
		t.Fatalf("the queries take %d bytes: want just under %d", n, MaxGroupQueryBytes)
	}
	for _, c := range checks {
		q, err := c.Render(QueryData{Group: group, Version: st.TargetVersion, StartVersion: st.StartVersion})
		if err != nil {
			t.Fatal(err)
		}
		v := -1.2345678901234567e-300
		st.Analysis = append(st.Analysis, CheckStatus{Name: c.Name, Query: q, Success: c.Success, Failure: c.Failure,
			Interval: c.Interval, Count: MaxCheckCount, InconclusiveLimit: MaxInconclusiveLimit, Since: st.Since,
			Measurements: 1 << 40, Passes: 1 << 40, Inconclusive: 1 << 40, Result: ResultInconclusive, Value: &v,
			Series: text, Detail: text, At: st.Since})
	}
	st.InitialCount, st.FailedCount, st.TimedOutCount, st.Blocked = 1<<40, 1<<40, 1<<40, 1<<40
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestBoundedStatus: whatever text a status carries (a 1.5 MB Prometheus
// label, a hostile reason), the status as stored is under MaxStatusBytes,
// and nothing a decision reads is cut; a small status is left as it is.
func TestBoundedStatus(t *testing.T) {
	small := worstStatus(t, "short")
	got, data, err := small.Bounded()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(small)
	if diff := cmp.Diff(small, got); diff != "" || string(data) != string(want) {
		t.Errorf("a status that fits was changed (-want +got):\n%s", diff)
	}

	for name, st := range map[string]GroupStatus{
		// The label of issue 24, in one check's series.
		"a 1.5 MB series": func() GroupStatus {
			st := worstStatus(t, "short")
			st.Analysis[3].Series = strings.Repeat("x", 1500<<10)
			return st
		}(),
		// What JSON escapes six bytes for one, in every field.
		"escaped text everywhere": worstStatus(t, strings.Repeat("<\u2028\x01", 2<<10)),
		// A bit too much in every field.
		"long text everywhere": worstStatus(t, strings.Repeat("é", 3000)),
	} {
		before, _ := json.Marshal(st)
		got, data, err := st.Bounded()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(data) >= MaxStatusBytes || len(before) < MaxStatusBytes {
			t.Fatalf("%s: %d bytes of JSON before, %d after; want over and then under %d", name, len(before), len(data), MaxStatusBytes)
		}
		var back GroupStatus
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		if err := back.Validate(); err != nil {
			t.Errorf("the bounded status does not validate: %v", err)
		}
		// Only the free text differs.
		drop := func(st GroupStatus) GroupStatus {
			st = st.Clone()
			st.clipText(0)
			for i := range st.Approvals {
				st.Approvals[i].By = ""
			}
			return st
		}
		if diff := cmp.Diff(drop(st), drop(back)); diff != "" {
			t.Errorf("%s: more than the free text changed (-want +got):\n%s", name, diff)
		}
		if !strings.HasSuffix(got.Analysis[3].Series, "…") || got.Approvals[0].By == "" {
			t.Errorf("%s: series %q, approver %q: want the series cut, the approver named", name, ClipText(got.Analysis[3].Series, 20), got.Approvals[0].By)
		}
		if again, _ := json.Marshal(st); string(again) != string(before) {
			t.Errorf("%s: Bounded changed the status it was called on", name)
		}
	}

	// Queries longer than Config.Validate allows can make it impossible.
	huge := worstStatus(t, "x")
	for i := range huge.Analysis {
		huge.Analysis[i].Query = strings.Repeat(">", 8<<10)
	}
	if _, _, err := huge.Bounded(); !errors.Is(err, ErrStatusTooLarge) {
		t.Errorf("queries of 20 × 48 KiB of JSON: %v, want ErrStatusTooLarge", err)
	}
}

// TestNextHaltsOnHugeLabel: a failing measurement whose series carries a
// 1.5 MB label halts the group, and the halted status fits MaxStatusBytes
// as Next returns it: the label is cut before it enters the status.
func TestNextHaltsOnHugeLabel(t *testing.T) {
	errs := goodCheck("errors")
	f := newAnalysisFixture(t, errs)
	m := f.measure(errs, 11*time.Minute)
	m.Samples = []Sample{{Series: `{instance="a"}`, Value: 0}, {Series: `{instance="` + strings.Repeat("x", 1500<<10) + `"}`, Value: 0.5}}
	st, _ := f.next(f.canary(f.status(errs)), f.agents(0), 11*time.Minute, m)
	if !st.Halted {
		t.Fatalf("not halted: %+v", st)
	}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) >= 8<<10 || len(st.Analysis[0].Series) > MaxSeriesLen+len("…") {
		t.Errorf("status %d bytes, series %d bytes: the label was not cut", len(data), len(st.Analysis[0].Series))
	}
}
