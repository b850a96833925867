package heartbeat_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/heartbeat"
	"github.com/fleetwave/fleetwave/pkg/rollout"
)

const (
	testID    rollout.AgentID = "1b4e28ba-2fa1-4d2e-883f-0016d3cca427"
	otherID   rollout.AgentID = "00000000-0000-4000-8000-000000000001"
	testGroup                 = "prod"
)

// validHeartbeat is a fully populated heartbeat, as an agent mid-update
// reports it.
func validHeartbeat() heartbeat.Heartbeat {
	return heartbeat.Heartbeat{
		V:              1,
		AgentID:        testID,
		Hostname:       "web-01.dc1.example.net",
		Group:          testGroup,
		ActiveVersion:  "1.4.2",
		StartVersion:   "1.4.1",
		StartTime:      time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC),
		Rollback:       false,
		RollbackFrom:   "",
		Error:          "",
		UpdaterVersion: "1.4.2-rc.1+build.7",
		At:             time.Date(2025, 3, 1, 10, 5, 0, 123456789, time.UTC),
		Seq:            42,
	}
}

// validFields is validHeartbeat as a generic JSON object, so cases can
// change, remove or add a single field.
func validFields(t testing.TB) map[string]any {
	t.Helper()
	h := validHeartbeat()
	b, err := json.Marshal(&h)
	if err != nil {
		t.Fatalf("marshal valid heartbeat: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("unmarshal valid heartbeat: %v", err)
	}
	return m
}

// payload returns the JSON of validFields after edit.
func payload(t testing.TB, edit func(m map[string]any)) []byte {
	t.Helper()
	m := validFields(t)
	if edit != nil {
		edit(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("marshal payload: %v", err)
	}
	return b
}

func set(key string, v any) func(map[string]any) {
	return func(m map[string]any) { m[key] = v }
}

func del(key string) func(map[string]any) {
	return func(m map[string]any) { delete(m, key) }
}

// padTo grows an unknown field so that the payload is exactly n bytes.
func padTo(t testing.TB, n int) []byte {
	t.Helper()
	base := payload(t, set("padding", ""))
	if len(base) > n {
		t.Fatalf("base payload is %d bytes, cannot pad to %d", len(base), n)
	}
	b := payload(t, set("padding", strings.Repeat("x", n-len(base))))
	if len(b) != n {
		t.Fatalf("padded payload is %d bytes, want %d", len(b), n)
	}
	return b
}

var sentinels = []error{
	heartbeat.ErrMalformed,
	heartbeat.ErrTooLarge,
	heartbeat.ErrUnsupportedVersion,
	heartbeat.ErrSubjectMismatch,
}

// checkErr fails unless err is want (nil meaning success) and wraps no other
// sentinel of the package.
func checkErr(t testing.TB, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("error = %v, want errors.Is(err, %q)", err, want)
	}
	for _, s := range sentinels {
		if s != want && errors.Is(err, s) {
			t.Errorf("error %v also matches %q; want only %q", err, s, want)
		}
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	valid := validHeartbeat()
	rolledBack := validHeartbeat()
	rolledBack.Rollback, rolledBack.RollbackFrom, rolledBack.Error = true, "1.5.0", "health check failed: HTTP 503"
	minimal := heartbeat.Heartbeat{V: 1, AgentID: testID, Group: testGroup, At: valid.At}
	fullErr := validHeartbeat()
	fullErr.Error = strings.Repeat("e", heartbeat.MaxErrorLen)
	longHost := validHeartbeat()
	longHost.Hostname = strings.Repeat("h", 255)

	tests := []struct {
		name    string
		data    []byte
		want    *heartbeat.Heartbeat // checked when wantErr is nil
		wantErr error
	}{
		{name: "valid", data: payload(t, nil), want: &valid},
		{name: "rolled back with error", data: payload(t, func(m map[string]any) {
			m["rollback"], m["rollback_from"], m["error"] = true, "1.5.0", "health check failed: HTTP 503"
		}), want: &rolledBack},
		{name: "minimal: nothing installed, no start_time", data: []byte(
			`{"v":1,"agent_id":"` + string(testID) + `","group":"prod","at":"2025-03-01T10:05:00.123456789Z"}`),
			want: &minimal},
		{name: "unknown fields are accepted", data: payload(t, func(m map[string]any) {
			m["future_field"] = map[string]any{"nested": []any{1, "two", nil}}
			m["another"] = 3.5
		}), want: &valid},
		{name: "trailing newline", data: append(payload(t, nil), '\n'), want: &valid},
		{name: "error exactly MaxErrorLen", data: payload(t, set("error", fullErr.Error)), want: &fullErr},
		{name: "hostname 255 bytes", data: payload(t, set("hostname", longHost.Hostname)), want: &longHost},
		{name: "exactly MaxSize", data: padTo(t, heartbeat.MaxSize), want: &valid},

		{name: "v 0", data: payload(t, set("v", 0)), wantErr: heartbeat.ErrUnsupportedVersion},
		{name: "v 2", data: payload(t, set("v", 2)), wantErr: heartbeat.ErrUnsupportedVersion},
		{name: "v missing", data: payload(t, del("v")), wantErr: heartbeat.ErrUnsupportedVersion},
		{name: "v a string", data: payload(t, set("v", "1")), wantErr: heartbeat.ErrMalformed},

		{name: "agent_id missing", data: payload(t, del("agent_id")), wantErr: heartbeat.ErrMalformed},
		{name: "agent_id empty", data: payload(t, set("agent_id", "")), wantErr: heartbeat.ErrMalformed},
		{name: "agent_id uppercase", data: payload(t, set("agent_id", strings.ToUpper(string(testID)))), wantErr: heartbeat.ErrMalformed},
		{name: "agent_id without hyphens", data: payload(t, set("agent_id", strings.ReplaceAll(string(testID), "-", ""))), wantErr: heartbeat.ErrMalformed},
		{name: "agent_id too short", data: payload(t, set("agent_id", string(testID[:35]))), wantErr: heartbeat.ErrMalformed},
		{name: "agent_id too long", data: payload(t, set("agent_id", string(testID)+"0")), wantErr: heartbeat.ErrMalformed},
		{name: "agent_id braced", data: payload(t, set("agent_id", "{"+string(testID[1:35])+"}")), wantErr: heartbeat.ErrMalformed},
		{name: "agent_id not hex", data: payload(t, set("agent_id", "1b4e28ba-2fa1-4d2e-883f-0016d3cca42g")), wantErr: heartbeat.ErrMalformed},

		{name: "group missing", data: payload(t, del("group")), wantErr: heartbeat.ErrMalformed},
		{name: "group uppercase", data: payload(t, set("group", "Prod")), wantErr: heartbeat.ErrMalformed},
		{name: "group with dot", data: payload(t, set("group", "prod.eu")), wantErr: heartbeat.ErrMalformed},
		{name: "group wildcard", data: payload(t, set("group", "*")), wantErr: heartbeat.ErrMalformed},
		{name: "group full wildcard", data: payload(t, set("group", ">")), wantErr: heartbeat.ErrMalformed},
		{name: "group with space", data: payload(t, set("group", "prod eu")), wantErr: heartbeat.ErrMalformed},
		{name: "group leading hyphen", data: payload(t, set("group", "-prod")), wantErr: heartbeat.ErrMalformed},
		{name: "group trailing underscore", data: payload(t, set("group", "prod_")), wantErr: heartbeat.ErrMalformed},
		{name: "group too long", data: payload(t, set("group", strings.Repeat("g", rollout.MaxGroupNameLen+1))), wantErr: heartbeat.ErrMalformed},

		{name: "hostname too long", data: payload(t, set("hostname", strings.Repeat("h", 256))), wantErr: heartbeat.ErrMalformed},
		{name: "rollback without rollback_from", data: payload(t, set("rollback", true)), wantErr: heartbeat.ErrMalformed},
		{name: "error over MaxErrorLen", data: payload(t, set("error", strings.Repeat("e", heartbeat.MaxErrorLen+1))), wantErr: heartbeat.ErrMalformed},
		{name: "at missing", data: payload(t, del("at")), wantErr: heartbeat.ErrMalformed},
		{name: "at zero", data: payload(t, set("at", "0001-01-01T00:00:00Z")), wantErr: heartbeat.ErrMalformed},
		{name: "at not a time", data: payload(t, set("at", "yesterday")), wantErr: heartbeat.ErrMalformed},
		{name: "seq negative", data: payload(t, set("seq", -1)), wantErr: heartbeat.ErrMalformed},

		{name: "one byte over MaxSize", data: padTo(t, heartbeat.MaxSize+1), wantErr: heartbeat.ErrTooLarge},
		{name: "far over MaxSize", data: padTo(t, 64<<10), wantErr: heartbeat.ErrTooLarge},

		{name: "trailing garbage", data: append(payload(t, nil), " garbage"...), wantErr: heartbeat.ErrMalformed},
		{name: "two objects", data: append(payload(t, nil), payload(t, nil)...), wantErr: heartbeat.ErrMalformed},
		// encoding/json's Decoder.More reports false before '}' and ']', so
		// these are the trailing data a More-based check lets through.
		{name: "trailing closing brace", data: append(payload(t, nil), '}'), wantErr: heartbeat.ErrMalformed},
		{name: "trailing closing bracket", data: append(payload(t, nil), ']'), wantErr: heartbeat.ErrMalformed},
		{name: "not JSON", data: []byte("v=1 agent_id=" + string(testID)), wantErr: heartbeat.ErrMalformed},
		{name: "empty", data: nil, wantErr: heartbeat.ErrMalformed},
		{name: "truncated", data: payload(t, nil)[:50], wantErr: heartbeat.ErrMalformed},
		{name: "JSON array", data: []byte("[" + string(payload(t, nil)) + "]"), wantErr: heartbeat.ErrMalformed},
		{name: "JSON string", data: []byte(`"heartbeat"`), wantErr: heartbeat.ErrMalformed},
		// null decodes to the zero heartbeat, whose v is 0.
		{name: "JSON null", data: []byte("null"), wantErr: heartbeat.ErrUnsupportedVersion},
		{name: "empty object", data: []byte("{}"), wantErr: heartbeat.ErrUnsupportedVersion},
	}
	for _, field := range []string{"active_version", "start_version", "rollback_from", "updater_version", "updating_to"} {
		for _, bad := range []string{"1.2", "v1.2.3", "abc", "1.2.3.4", "01.2.3", " 1.2.3"} {
			tests = append(tests, struct {
				name    string
				data    []byte
				want    *heartbeat.Heartbeat
				wantErr error
			}{name: fmt.Sprintf("%s %q", field, bad), data: payload(t, set(field, bad)), wantErr: heartbeat.ErrMalformed})
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := heartbeat.Decode(tc.data)
			checkErr(t, err, tc.wantErr)
			if tc.wantErr != nil {
				if got != nil {
					t.Errorf("Decode returned %+v along with error %v", got, err)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Decode mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	t.Parallel()
	withError := validHeartbeat()
	withError.Rollback, withError.RollbackFrom = true, "1.5.0"
	withError.Error = "health check: <html>503 & \"quoted\"</html>\n\ttab, ünïcödé, \u2028"
	nonUTC := validHeartbeat()
	nonUTC.At = time.Date(2025, 3, 1, 11, 5, 0, 1, time.FixedZone("CET", 3600))
	nonUTC.StartTime = time.Time{}
	maxSeq := validHeartbeat()
	maxSeq.Seq = ^uint64(0)

	tests := []struct {
		name string
		hb   heartbeat.Heartbeat
	}{
		{name: "valid", hb: validHeartbeat()},
		{name: "minimal", hb: heartbeat.Heartbeat{V: 1, AgentID: testID, Group: testGroup, At: validHeartbeat().At}},
		{name: "error with characters JSON escapes", hb: withError},
		{name: "non-UTC at, no start_time", hb: nonUTC},
		{name: "max seq", hb: maxSeq},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, err := heartbeat.Encode(&tc.hb)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			got, err := heartbeat.Decode(data)
			if err != nil {
				t.Fatalf("Decode(Encode(h)): %v\npayload: %s", err, data)
			}
			if diff := cmp.Diff(&tc.hb, got); diff != "" {
				t.Errorf("round trip mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEncodeFields pins the wire shape of DESIGN §2: snake_case keys, "v":1,
// and nothing else.
func TestEncodeFields(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		hb   heartbeat.Heartbeat
		want []string
	}{
		{
			name: "full",
			hb:   validHeartbeat(),
			want: []string{"active_version", "agent_id", "at", "error", "group", "hostname", "rollback",
				"rollback_from", "seq", "start_time", "start_version", "updater_version", "v"},
		},
		{
			name: "in flight: updating_to",
			hb: func() heartbeat.Heartbeat {
				h := validHeartbeat()
				h.StartVersion, h.UpdatingTo = h.ActiveVersion, "1.5.0"
				return h
			}(),
			want: []string{"active_version", "agent_id", "at", "error", "group", "hostname", "rollback",
				"rollback_from", "seq", "start_time", "start_version", "updater_version", "updating_to", "v"},
		},
		{
			name: "failed: error_class and error_cause",
			hb: func() heartbeat.Heartbeat {
				h := validHeartbeat()
				h.Error, h.ErrorClass, h.ErrorCause = "install 1.5.0: fetch: disk", heartbeat.ClassInfrastructure, "disk full"
				return h
			}(),
			want: []string{"active_version", "agent_id", "at", "error", "error_cause", "error_class", "group", "hostname", "rollback",
				"rollback_from", "seq", "start_time", "start_version", "updater_version", "v"},
		},
		{
			name: "site",
			hb: func() heartbeat.Heartbeat {
				h := validHeartbeat()
				h.Site = "edge-berlin"
				return h
			}(),
			want: []string{"active_version", "agent_id", "at", "error", "group", "hostname", "rollback",
				"rollback_from", "seq", "site", "start_time", "start_version", "updater_version", "v"},
		},
		{
			name: "zero start_time is omitted",
			hb:   heartbeat.Heartbeat{V: 1, AgentID: testID, Group: testGroup, At: validHeartbeat().At},
			want: []string{"active_version", "agent_id", "at", "error", "group", "hostname", "rollback",
				"rollback_from", "seq", "start_version", "updater_version", "v"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, err := heartbeat.Encode(&tc.hb)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(data, &m); err != nil {
				t.Fatalf("Encode produced invalid JSON %s: %v", data, err)
			}
			if diff := cmp.Diff(tc.want, slices.Sorted(maps.Keys(m))); diff != "" {
				t.Errorf("keys mismatch (-want +got):\n%s", diff)
			}
			if got := string(m["v"]); got != "1" {
				t.Errorf(`"v" = %s, want 1`, got)
			}
		})
	}
}

// TestEncodeWorstCaseFitsMaxSize: MaxErrorLen exists so that "a long error
// never pushes the heartbeat over MaxSize", and agentd truncates its error
// text to MaxErrorLen bytes. Every heartbeat Validate accepts must therefore
// encode; otherwise the publisher retries a beat that can never be sent and
// the agent silently drops out of the inventory. JSON escaping makes one
// byte of error text up to six bytes on the wire ("<" is \u003c).
func TestEncodeWorstCaseFitsMaxSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		char string // repeated to fill error and hostname
	}{
		{name: "plain text", char: "e"},
		{name: "HTML from a failed health check", char: "<"},
		{name: "ampersands", char: "&"},
		{name: "control characters", char: "\x01"},
		{name: "NUL bytes from binary output", char: "\x00"},
		{name: "invalid UTF-8 from binary output", char: "\xff"},
		{name: "line separators", char: "\u2028"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hb := validHeartbeat()
			hb.Rollback, hb.RollbackFrom = true, "1.5.0-rc.1+build.1234567890"
			hb.Error = strings.Repeat(tc.char, heartbeat.MaxErrorLen/len(tc.char))
			hb.ErrorOutput = strings.Repeat(tc.char, heartbeat.MaxOutputLen/len(tc.char))
			hb.Hostname = strings.Repeat(tc.char, 255/len(tc.char))
			hb.ErrorClass, hb.ErrorCause = heartbeat.ClassInfrastructure, strings.Repeat(tc.char, heartbeat.MaxCauseLen/len(tc.char))
			hb.UpdatingTo = "1.5.0-rc.1+build.1234567890"
			if err := hb.Validate(); err != nil {
				// Refusing such text up front also keeps the invariant,
				// as long as Encode refuses it the same way.
				checkErr(t, err, heartbeat.ErrMalformed)
				_, encErr := heartbeat.Encode(&hb)
				checkErr(t, encErr, heartbeat.ErrMalformed)
				return
			}
			data, err := heartbeat.Encode(&hb)
			if err != nil {
				t.Fatalf("Encode of a heartbeat that Validate accepts: %v", err)
			}
			if _, err := heartbeat.Decode(data); err != nil {
				t.Errorf("Decode(Encode(h)): %v", err)
			}
		})
	}
}

// TestValidate runs Validate and Encode (which must refuse exactly what
// Validate refuses) over heartbeats built in Go.
func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		edit    func(h *heartbeat.Heartbeat)
		wantErr error
	}{
		{name: "valid", edit: func(h *heartbeat.Heartbeat) {}},
		{name: "nothing installed", edit: func(h *heartbeat.Heartbeat) { h.ActiveVersion, h.StartVersion = "", "" }},
		{name: "rollback with rollback_from", edit: func(h *heartbeat.Heartbeat) { h.Rollback, h.RollbackFrom = true, "1.5.0" }},
		{name: "rollback_from without rollback", edit: func(h *heartbeat.Heartbeat) { h.RollbackFrom = "1.5.0" }},
		{name: "prerelease and build", edit: func(h *heartbeat.Heartbeat) { h.ActiveVersion = "2.0.0-beta.1+sha.abc" }},
		{name: "v 0", edit: func(h *heartbeat.Heartbeat) { h.V = 0 }, wantErr: heartbeat.ErrUnsupportedVersion},
		{name: "v 2", edit: func(h *heartbeat.Heartbeat) { h.V = 2 }, wantErr: heartbeat.ErrUnsupportedVersion},
		{name: "v -1", edit: func(h *heartbeat.Heartbeat) { h.V = -1 }, wantErr: heartbeat.ErrUnsupportedVersion},
		{name: "agent_id empty", edit: func(h *heartbeat.Heartbeat) { h.AgentID = "" }, wantErr: heartbeat.ErrMalformed},
		{name: "agent_id uppercase", edit: func(h *heartbeat.Heartbeat) { h.AgentID = rollout.AgentID(strings.ToUpper(string(testID))) }, wantErr: heartbeat.ErrMalformed},
		{name: "group empty", edit: func(h *heartbeat.Heartbeat) { h.Group = "" }, wantErr: heartbeat.ErrMalformed},
		{name: "group with dot", edit: func(h *heartbeat.Heartbeat) { h.Group = "a.b" }, wantErr: heartbeat.ErrMalformed},
		{name: "hostname too long", edit: func(h *heartbeat.Heartbeat) { h.Hostname = strings.Repeat("h", 256) }, wantErr: heartbeat.ErrMalformed},
		{name: "rollback without rollback_from", edit: func(h *heartbeat.Heartbeat) { h.Rollback = true }, wantErr: heartbeat.ErrMalformed},
		{name: "error over MaxErrorLen", edit: func(h *heartbeat.Heartbeat) { h.Error = strings.Repeat("e", heartbeat.MaxErrorLen+1) }, wantErr: heartbeat.ErrMalformed},
		{name: "at zero", edit: func(h *heartbeat.Heartbeat) { h.At = time.Time{} }, wantErr: heartbeat.ErrMalformed},
		{name: "error_class infrastructure", edit: func(h *heartbeat.Heartbeat) {
			h.Error, h.ErrorClass, h.ErrorCause = "install 2.0.0: fetch: x", heartbeat.ClassInfrastructure, "disk full"
		}},
		{name: "error_class release without cause", edit: func(h *heartbeat.Heartbeat) { h.Error, h.ErrorClass = "x", heartbeat.ClassRelease }},
		{name: "error_class artifact", edit: func(h *heartbeat.Heartbeat) { h.Error, h.ErrorClass = "x", heartbeat.ClassArtifact }},
		{name: "error_class unknown", edit: func(h *heartbeat.Heartbeat) { h.Error, h.ErrorClass = "x", "weather" }, wantErr: heartbeat.ErrMalformed},
		{name: "error_class upper case", edit: func(h *heartbeat.Heartbeat) { h.Error, h.ErrorClass = "x", "Release" }, wantErr: heartbeat.ErrMalformed},
		{name: "error_class without error", edit: func(h *heartbeat.Heartbeat) { h.Error, h.ErrorClass = "", heartbeat.ClassRelease }, wantErr: heartbeat.ErrMalformed},
		{name: "error_cause without error", edit: func(h *heartbeat.Heartbeat) { h.Error, h.ErrorCause = "", "disk full" }, wantErr: heartbeat.ErrMalformed},
		{name: "error_cause without class", edit: func(h *heartbeat.Heartbeat) { h.Error, h.ErrorCause = "x", "disk full" }, wantErr: heartbeat.ErrMalformed},
		{name: "error_cause too long", edit: func(h *heartbeat.Heartbeat) {
			h.Error, h.ErrorClass, h.ErrorCause = "x", heartbeat.ClassRelease, strings.Repeat("c", heartbeat.MaxCauseLen+1)
		}, wantErr: heartbeat.ErrMalformed},
		{name: "error_cause control character", edit: func(h *heartbeat.Heartbeat) {
			h.Error, h.ErrorClass, h.ErrorCause = "x", heartbeat.ClassRelease, "disk\x1bfull"
		}, wantErr: heartbeat.ErrMalformed},
		{name: "error_output", edit: func(h *heartbeat.Heartbeat) {
			h.Error, h.ErrorOutput = "x", "panic: open /etc/app.conf: no such file\n\tgoroutine 1 [running]:\n<b>\u202e"
		}},
		{name: "error_output at MaxOutputLen", edit: func(h *heartbeat.Heartbeat) {
			h.Error, h.ErrorOutput = "x", strings.Repeat("o\n", heartbeat.MaxOutputLen/2)
		}},
		{name: "error_output over MaxOutputLen", edit: func(h *heartbeat.Heartbeat) {
			h.Error, h.ErrorOutput = "x", strings.Repeat("o", heartbeat.MaxOutputLen+1)
		}, wantErr: heartbeat.ErrMalformed},
		{name: "error_output without error", edit: func(h *heartbeat.Heartbeat) { h.ErrorOutput = "boom" }, wantErr: heartbeat.ErrMalformed},
		{name: "error_output control character", edit: func(h *heartbeat.Heartbeat) {
			h.Error, h.ErrorOutput = "x", "\x1b[31mred"
		}, wantErr: heartbeat.ErrMalformed},
		{name: "site", edit: func(h *heartbeat.Heartbeat) { h.Site = "edge-berlin" }},
		{name: "site like a JetStream domain", edit: func(h *heartbeat.Heartbeat) { h.Site = "EU.west_2" }},
		{name: "site too long", edit: func(h *heartbeat.Heartbeat) { h.Site = strings.Repeat("s", rollout.MaxSiteLen+1) }, wantErr: heartbeat.ErrMalformed},
		{name: "site with a space", edit: func(h *heartbeat.Heartbeat) { h.Site = "edge berlin" }, wantErr: heartbeat.ErrMalformed},
		{name: "site with a wildcard", edit: func(h *heartbeat.Heartbeat) { h.Site = "edge>" }, wantErr: heartbeat.ErrMalformed},
		{name: "site (none)", edit: func(h *heartbeat.Heartbeat) { h.Site = rollout.NoSite }, wantErr: heartbeat.ErrMalformed},
	}
	versionFields := []struct {
		name string
		ptr  func(h *heartbeat.Heartbeat) *string
	}{
		{"active_version", func(h *heartbeat.Heartbeat) *string { return &h.ActiveVersion }},
		{"start_version", func(h *heartbeat.Heartbeat) *string { return &h.StartVersion }},
		{"rollback_from", func(h *heartbeat.Heartbeat) *string { return &h.RollbackFrom }},
		{"updater_version", func(h *heartbeat.Heartbeat) *string { return &h.UpdaterVersion }},
		{"updating_to", func(h *heartbeat.Heartbeat) *string { return &h.UpdatingTo }},
	}
	for _, f := range versionFields {
		for _, bad := range []string{"1.2", "v1.2.3", "abc", "1", "1.2.3-", strings.Repeat("1", rollout.MaxVersionLen) + ".0.0"} {
			tests = append(tests, struct {
				name    string
				edit    func(h *heartbeat.Heartbeat)
				wantErr error
			}{
				name:    fmt.Sprintf("%s %.20q", f.name, bad),
				edit:    func(h *heartbeat.Heartbeat) { *f.ptr(h) = bad },
				wantErr: heartbeat.ErrMalformed,
			})
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hb := validHeartbeat()
			tc.edit(&hb)
			checkErr(t, hb.Validate(), tc.wantErr)
			data, err := heartbeat.Encode(&hb)
			checkErr(t, err, tc.wantErr)
			if tc.wantErr != nil && data != nil {
				t.Errorf("Encode returned %s along with error %v", data, err)
			}
		})
	}
}

func TestSubjectFor(t *testing.T) {
	t.Parallel()
	if got, want := heartbeat.SubjectFor("prod", testID), "fleet.hb.prod."+string(testID); got != want {
		t.Errorf("SubjectFor = %q, want %q", got, want)
	}
}

func TestParseSubject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		subject   string
		wantGroup string
		wantID    rollout.AgentID
		wantErr   error
	}{
		{name: "valid", subject: "fleet.hb.prod." + string(testID), wantGroup: "prod", wantID: testID},
		{name: "round trip of SubjectFor", subject: heartbeat.SubjectFor("edge-eu_1", otherID), wantGroup: "edge-eu_1", wantID: otherID},
		{name: "extra token", subject: "fleet.hb.prod." + string(testID) + ".extra", wantErr: heartbeat.ErrSubjectMismatch},
		{name: "extra tokens in the middle", subject: "fleet.hb.prod.eu." + string(testID), wantErr: heartbeat.ErrSubjectMismatch},
		{name: "no agent token", subject: "fleet.hb.prod", wantErr: heartbeat.ErrSubjectMismatch},
		{name: "prefix only", subject: "fleet.hb.", wantErr: heartbeat.ErrSubjectMismatch},
		{name: "other prefix", subject: "fleet.hbx.prod." + string(testID), wantErr: heartbeat.ErrSubjectMismatch},
		{name: "plan subject", subject: "fleet.plan.group.prod", wantErr: heartbeat.ErrSubjectMismatch},
		{name: "empty", subject: "", wantErr: heartbeat.ErrSubjectMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			group, id, err := heartbeat.ParseSubject(tc.subject)
			checkErr(t, err, tc.wantErr)
			if tc.wantErr != nil {
				return
			}
			if group != tc.wantGroup || id != tc.wantID {
				t.Errorf("ParseSubject(%q) = %q, %q; want %q, %q", tc.subject, group, id, tc.wantGroup, tc.wantID)
			}
		})
	}
}

func TestDecodeFrom(t *testing.T) {
	t.Parallel()
	valid := validHeartbeat()
	own := heartbeat.SubjectFor(testGroup, testID)
	tests := []struct {
		name    string
		subject string
		data    []byte
		wantErr error
	}{
		{name: "own subject", subject: own, data: payload(t, nil)},
		{name: "other group in subject", subject: heartbeat.SubjectFor("staging", testID), data: payload(t, nil), wantErr: heartbeat.ErrSubjectMismatch},
		{name: "other agent in subject", subject: heartbeat.SubjectFor(testGroup, otherID), data: payload(t, nil), wantErr: heartbeat.ErrSubjectMismatch},
		{name: "uppercase agent in subject", subject: "fleet.hb.prod." + strings.ToUpper(string(testID)), data: payload(t, nil), wantErr: heartbeat.ErrSubjectMismatch},
		{name: "empty group in subject", subject: "fleet.hb.." + string(testID), data: payload(t, nil), wantErr: heartbeat.ErrSubjectMismatch},
		{name: "empty agent in subject", subject: "fleet.hb.prod.", data: payload(t, nil), wantErr: heartbeat.ErrSubjectMismatch},
		{name: "subject with extra tokens", subject: own + ".x", data: payload(t, nil), wantErr: heartbeat.ErrSubjectMismatch},
		{name: "subject not a heartbeat subject", subject: "fleet.events.prod", data: payload(t, nil), wantErr: heartbeat.ErrSubjectMismatch},
		{name: "body malformed", subject: own, data: payload(t, set("group", "Prod")), wantErr: heartbeat.ErrMalformed},
		{name: "body too large", subject: own, data: padTo(t, heartbeat.MaxSize+1), wantErr: heartbeat.ErrTooLarge},
		{name: "body wrong v", subject: own, data: payload(t, set("v", 2)), wantErr: heartbeat.ErrUnsupportedVersion},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := heartbeat.DecodeFrom(tc.subject, tc.data)
			checkErr(t, err, tc.wantErr)
			if tc.wantErr != nil {
				if got != nil {
					t.Errorf("DecodeFrom returned %+v along with error %v", got, err)
				}
				return
			}
			if diff := cmp.Diff(&valid, got); diff != "" {
				t.Errorf("DecodeFrom mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFailedAndVersion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		edit        func(h *heartbeat.Heartbeat)
		wantFailed  bool
		wantVersion string
	}{
		{name: "healthy", edit: func(h *heartbeat.Heartbeat) {}, wantVersion: "1.4.2"},
		{name: "rolled back", edit: func(h *heartbeat.Heartbeat) { h.Rollback, h.RollbackFrom = true, "1.5.0" }, wantFailed: true, wantVersion: "1.4.2"},
		{name: "error", edit: func(h *heartbeat.Heartbeat) { h.Error = "download: 404" }, wantFailed: true, wantVersion: "1.4.2"},
		{name: "nothing installed", edit: func(h *heartbeat.Heartbeat) { h.ActiveVersion = "" }, wantVersion: rollout.NoVersion},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hb := validHeartbeat()
			tc.edit(&hb)
			if got := hb.Failed(); got != tc.wantFailed {
				t.Errorf("Failed() = %v, want %v", got, tc.wantFailed)
			}
			if got := hb.Version(); got != tc.wantVersion {
				t.Errorf("Version() = %q, want %q", got, tc.wantVersion)
			}
		})
	}
}

// TestCleanText: what agentd passes through CleanText (error texts) and
// CleanName (its host name) is never refused by Validate, so an odd error
// text or host name cannot stop an agent's heartbeats.
func TestCleanText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    string
		limit int
		want  string // "" means: only check the properties
	}{
		{name: "clean short text unchanged", in: "download: HTTP 404", limit: heartbeat.MaxErrorLen, want: "download: HTTP 404"},
		{name: "tab and newline kept", in: "a\tb\nc", limit: heartbeat.MaxErrorLen, want: "a\tb\nc"},
		{name: "control characters become spaces", in: "a\x00b\x01c\rd\x1b[31m", limit: heartbeat.MaxErrorLen, want: "a b c d [31m"},
		{name: "invalid UTF-8 replaced", in: "bad \xff\xfe byte", limit: heartbeat.MaxErrorLen, want: "bad \uFFFD byte"},
		{name: "exactly the limit is not cut", in: strings.Repeat("x", 10), limit: 10, want: strings.Repeat("x", 10)},
		{name: "one over the limit is cut with an ellipsis", in: strings.Repeat("x", 11), limit: 10, want: "xxxxxxx..."},
		{name: "cut at a rune boundary", in: strings.Repeat("é", 10), limit: 10, want: "ééé..."},
		{name: "long HTML body", in: strings.Repeat("<p>&amp;</p>", 500), limit: heartbeat.MaxErrorLen},
		{name: "long binary output", in: strings.Repeat("\x00\xff\x01", 1000), limit: heartbeat.MaxErrorLen},
		{name: "long multibyte text", in: strings.Repeat("日本語\u2028", 1000), limit: heartbeat.MaxErrorLen},
		{name: "long quotes and backslashes", in: strings.Repeat(`"\`, 1000), limit: heartbeat.MaxErrorLen},
		{name: "hostname limit", in: strings.Repeat("h\x00", 300), limit: heartbeat.MaxHostnameLen},
		{name: "limit smaller than the ellipsis", in: "abcdef", limit: 2},
		{name: "limit zero", in: "abcdef", limit: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("CleanText(%.20q, %d) panicked: %v", tc.in, tc.limit, r)
					}
				}()
				got = heartbeat.CleanText(tc.in, tc.limit)
			}()
			if tc.want != "" && got != tc.want {
				t.Errorf("CleanText = %q, want %q", got, tc.want)
			}
			if len(got) > tc.limit {
				t.Errorf("CleanText returned %d bytes, over the limit %d", len(got), tc.limit)
			}
			if again := heartbeat.CleanText(got, tc.limit); again != got {
				t.Errorf("CleanText is not idempotent: %q, then %q", got, again)
			}
			hb := validHeartbeat()
			hb.Rollback, hb.RollbackFrom = true, "1.5.0-rc.1+build.1234567890"
			hb.Error = heartbeat.CleanText(tc.in, min(tc.limit, heartbeat.MaxErrorLen))
			hb.Hostname = heartbeat.CleanName(tc.in, min(tc.limit, heartbeat.MaxHostnameLen))
			data, err := heartbeat.Encode(&hb)
			if err != nil {
				t.Fatalf("Encode of cleaned text: %v", err)
			}
			back, err := heartbeat.Decode(data)
			if err != nil {
				t.Fatalf("Decode(Encode(h)): %v", err)
			}
			if diff := cmp.Diff(&hb, back); diff != "" {
				t.Errorf("round trip of cleaned text (-want +got):\n%s", diff)
			}
		})
	}
}
