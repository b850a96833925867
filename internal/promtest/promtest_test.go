package promtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/fleetwave/fleetwave/internal/natstest"
	"github.com/fleetwave/fleetwave/internal/promtest"
)

// TestExporterScraped: Prometheus scrapes the exporter; a series the test
// deletes has no data at the next scrape (stale).
func TestExporterScraped(t *testing.T) {
	e := promtest.NewExporter(t)
	e.SetErrorRate("1.0.0", 0.25)
	p := promtest.Start(t, promtest.Options{Targets: []string{e.Addr}})
	value := func(q string) (model.Vector, error) {
		v, _, _, err := p.API.Query(context.Background(), q, time.Time{})
		if err != nil {
			return nil, err
		}
		return v.(model.Vector), nil
	}
	natstest.Eventually(t, 30*time.Second, func() error {
		v, err := value(`app_error_rate{version="1.0.0"}`)
		if err != nil {
			return err
		}
		if len(v) != 1 || v[0].Value != 0.25 {
			up, _ := value("up")
			return fmt.Errorf("app_error_rate: %v (up: %v)", v, up)
		}
		return nil
	})
}
