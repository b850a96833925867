package run

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

func TestAllStopsTheOthersAndWaits(t *testing.T) {
	boom := errors.New("boom")
	var stopped atomic.Int32
	wait := func(ctx context.Context) error {
		<-ctx.Done()
		stopped.Add(1)
		return ctx.Err()
	}
	err := All(context.Background(), wait, func(context.Context) error { return boom }, wait)
	if !errors.Is(err, boom) {
		t.Fatalf("All = %v, want the first loop's error", err)
	}
	if n := stopped.Load(); n != 2 {
		t.Fatalf("%d of 2 other loops had stopped when All returned", n)
	}
}
