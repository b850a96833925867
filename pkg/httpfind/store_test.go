package httpfind

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fleetwave/fleetwave/pkg/rollout"
)

func TestStoreZeroValue(t *testing.T) {
	var s Store
	p := s.Get()
	if p == nil || p.HasSpec || len(p.Groups) != 0 {
		t.Fatalf("zero Store: %+v, want an empty plan", p)
	}
	if _, err := p.Find(idLow, testGroup); !errors.Is(err, ErrNoPlan) {
		t.Fatalf("Find on an empty plan: %v, want ErrNoPlan", err)
	}
	s.DeleteGroup("nothing") // no panic on an empty store
	s.SetGroup(testGroup, testStatus(rollout.StateActive))
	if got := s.Get(); got.HasSpec || got.Groups[testGroup].State != rollout.StateActive {
		t.Fatalf("after SetGroup: %+v", got)
	}
}

// TestStoreSnapshotsAreImmutable: a reader's snapshot never changes, and the
// store keeps no memory its callers hold.
func TestStoreSnapshotsAreImmutable(t *testing.T) {
	spec := rollout.DefaultSpec(v1, v2)
	st := testStatus(rollout.StateActive)
	in := Plan{Spec: spec, HasSpec: true, Groups: map[string]rollout.GroupStatus{testGroup: st}}
	var s Store
	s.Set(in)
	before := s.Get()
	want := *before.clone()

	// The caller changes what it passed in.
	in.Groups["staging"] = testStatus(rollout.StateDone)
	in.Groups[testGroup].Canaries[0].ID = idHigh
	// Writers change the store.
	s.SetGroup("qa", testStatus(rollout.StateCanary))
	s.DeleteGroup(testGroup)
	s.SetSpec(rollout.DefaultSpec(v2, "1.5.0"))
	mine := testStatus(rollout.StateDone)
	s.SetGroup("edge", mine)
	mine.Canaries[0].ID = idLow

	if diff := cmp.Diff(want, *before); diff != "" {
		t.Errorf("an earlier snapshot changed (-want +got):\n%s", diff)
	}
	now := s.Get()
	if _, ok := now.Groups[testGroup]; ok {
		t.Errorf("DeleteGroup left %q", testGroup)
	}
	if now.Spec.TargetVersion != "1.5.0" || !now.HasSpec {
		t.Errorf("SetSpec: %+v", now.Spec)
	}
	if _, ok := now.Groups["staging"]; ok {
		t.Error("the store shares the map given to Set")
	}
	if got := now.Groups["edge"].Canaries[0].ID; got != idCanary {
		t.Errorf("the store shares the canaries given to SetGroup: %s", got)
	}
}

// TestStoreConcurrentReadsAndWrites runs writers and lock-free readers (bare
// and through the handler) together; run it with -race. Every snapshot a
// reader sees must be whole: each group under its own name, and the same
// contents when read twice.
func TestStoreConcurrentReadsAndWrites(t *testing.T) {
	var s Store
	s.SetSpec(rollout.DefaultSpec(v1, v2))
	h := &Handler{Store: &s}
	const writers, readers, rounds = 4, 8, 500

	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range rounds {
				name := fmt.Sprintf("g%d-%d", w, i%7)
				st := testStatus(rollout.StateActive)
				st.Group, st.Progress = name, float64(i%100)/100
				s.SetGroup(name, st)
				switch i % 5 {
				case 0:
					s.DeleteGroup(name)
				case 1:
					s.SetSpec(rollout.DefaultSpec(v1, []string{v2, "1.5.0"}[i%2]))
				case 2:
					if w == 0 {
						s.Set(Plan{Spec: rollout.DefaultSpec(v1, v2), HasSpec: true, Groups: map[string]rollout.GroupStatus{name: st}})
					}
				}
			}
		})
	}
	errs := make(chan error, readers)
	for r := range readers {
		wg.Go(func() {
			for i := range rounds {
				p := s.Get()
				n := len(p.Groups)
				for name, st := range p.Groups {
					if st.Group != name {
						errs <- fmt.Errorf("reader %d: group %q holds the status of %q", r, name, st.Group)
						return
					}
					if _, err := p.Find(idLow, name); err != nil {
						errs <- fmt.Errorf("reader %d: %v", r, err)
						return
					}
				}
				if len(p.Groups) != n {
					errs <- fmt.Errorf("reader %d: a snapshot changed under the reader", r)
					return
				}
				if i%10 == 0 {
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathFind+"?host="+string(idLow)+"&group=g0-1", nil))
					if rec.Code != http.StatusOK {
						errs <- fmt.Errorf("reader %d: find: %d %s", r, rec.Code, rec.Body)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
