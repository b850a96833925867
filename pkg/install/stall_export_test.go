package install

import "time"

// Pace exposes the stall rule's pure core to the external tests.
type Pace struct{ p pace }

func NewPace(window time.Duration, min int64, start time.Time) *Pace {
	return &Pace{newPace(window, min, start)}
}

func (p *Pace) GotHeaders(now time.Time)   { p.p.gotHeaders(now) }
func (p *Pace) Add(n int64, now time.Time) { p.p.add(n, now) }
func (p *Pace) Due() time.Time             { return p.p.due() }
func (p *Pace) Err() error                 { return p.p.err() }
