package release

import (
	"fmt"
	"slices"
	"time"

	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// WarnOffline is how long before an offline role's metadata (root,
// targets, snapshot) expires that Status warns: time enough to gather
// the keys' holders and sign a renewal.
const WarnOffline = 14 * 24 * time.Hour

// Status is what a repository serves and what waits for signatures.
type Status struct {
	Dir string `json:"dir"`
	// Published are the served roles, root first.
	Published []RoleState `json:"published"`
	// Staged are the documents waiting for signatures (root, targets).
	Staged []StagedState `json:"staged"`
	// Warnings: expired or soon-expiring metadata, a staged root that
	// can never be published.
	Warnings []string `json:"warnings,omitempty"`
}

// RoleState is one published role.
type RoleState struct {
	Role    string    `json:"role"`
	Version int64     `json:"version"`
	Expires time.Time `json:"expires"`
	// Keys and Threshold are the role's in the published root.
	Keys      []string `json:"keys"`
	Threshold int      `json:"threshold"`
}

// StagedState is one staged document.
type StagedState struct {
	Role    string    `json:"role"`
	Version int64     `json:"version"`
	Expires time.Time `json:"expires"`
	// Needs are the thresholds it must meet: a targets version one (the
	// targets keys of the root it will be published under); a root after
	// v1 two (the published root's root keys and its own).
	Needs []Need `json:"needs"`
	// Ready: every threshold is met (go-tuf verifies).
	Ready bool `json:"ready"`
	// Changes say what it changes against the published version, one
	// line each: what the signers are asked to sign.
	Changes []string `json:"changes"`
}

// Need is one threshold a staged document must meet.
type Need struct {
	// Of says whose keys: "root v3 root keys", "root v4 targets keys".
	Of        string `json:"of"`
	Threshold int    `json:"threshold"`
	// Keys may sign; SignedBy have, with a signature that verifies.
	Keys     []string `json:"keys"`
	SignedBy []string `json:"signed_by"`
}

// Missing is how many more signatures the need wants.
func (n Need) Missing() int { return max(0, n.Threshold-len(n.SignedBy)) }

// Status reads the repository's state. It reads files only.
func (r *Repo) Status() (*Status, error) {
	st := &Status{Dir: r.Dir, Published: []RoleState{}, Staged: []StagedState{}}
	pub, err := r.PublishedRoot()
	if err != nil {
		return nil, err
	}
	trust, err := r.trustRoot()
	if err != nil {
		return nil, err
	}
	now := r.now()
	if pub != nil {
		add := func(role string, v int64, exp time.Time, warnWithin time.Duration) {
			rl := pub.Signed.Roles[role]
			st.Published = append(st.Published, RoleState{Role: role, Version: v, Expires: exp, Keys: slices.Clone(rl.KeyIDs), Threshold: rl.Threshold})
			switch left := exp.Sub(now); {
			case left <= 0:
				st.Warnings = append(st.Warnings, fmt.Sprintf("%s v%d EXPIRED %s ago (%s): clients refuse the repository; %s", role, v, roundDur(-left), exp.Format(time.RFC3339), renewHint(role, r.Dir)))
			case left < warnWithin:
				st.Warnings = append(st.Warnings, fmt.Sprintf("%s v%d expires in %s (%s): %s", role, v, roundDur(left), exp.Format(time.RFC3339), renewHint(role, r.Dir)))
			}
		}
		add(metadata.ROOT, pub.Signed.Version, pub.Signed.Expires, WarnOffline)
		if t, err := r.PublishedTargets(); err != nil {
			return nil, err
		} else if t != nil {
			add(metadata.TARGETS, t.Signed.Version, t.Signed.Expires, WarnOffline)
		}
		if s, err := r.PublishedSnapshot(); err != nil {
			return nil, err
		} else if s != nil {
			add(metadata.SNAPSHOT, s.Signed.Version, s.Signed.Expires, WarnOffline)
		}
		if ts, err := r.PublishedTimestamp(); err != nil {
			return nil, err
		} else if ts != nil {
			add(metadata.TIMESTAMP, ts.Signed.Version, ts.Signed.Expires, r.expiry().Timestamp/2)
		}
	}
	if root, err := r.StagedRoot(); err != nil {
		return nil, err
	} else if root != nil {
		s := StagedState{Role: metadata.ROOT, Version: root.Signed.Version, Expires: root.Signed.Expires, Changes: rootChanges(pub, root)}
		if pub != nil {
			s.Needs = append(s.Needs, need(fmt.Sprintf("root v%d root keys", pub.Signed.Version), pub, metadata.ROOT, root))
			if root.Signed.Version != pub.Signed.Version+1 {
				st.Warnings = append(st.Warnings, fmt.Sprintf("staged root is v%d, the published v%d: it can never be published; remove %s and stage the change again", root.Signed.Version, pub.Signed.Version, r.stagedPath(metadata.ROOT)))
			}
		}
		s.Needs = append(s.Needs, need(fmt.Sprintf("root v%d root keys", root.Signed.Version), root, metadata.ROOT, root))
		s.Ready = r.rootReady(pub, root) == nil
		st.Staged = append(st.Staged, s)
	}
	if t, err := r.StagedTargets(); err != nil {
		return nil, err
	} else if t != nil {
		old, err := r.PublishedTargets()
		if err != nil {
			return nil, err
		}
		s := StagedState{Role: metadata.TARGETS, Version: t.Signed.Version, Expires: t.Signed.Expires, Changes: targetsChanges(old, t)}
		s.Needs = append(s.Needs, need(fmt.Sprintf("root v%d targets keys", trust.Signed.Version), trust, metadata.TARGETS, t))
		s.Ready = trust.VerifyDelegate(metadata.TARGETS, t) == nil
		st.Staged = append(st.Staged, s)
	}
	return st, nil
}

func need[T metadata.Roles](of string, root *metadata.Metadata[metadata.RootType], role string, md *metadata.Metadata[T]) Need {
	rl := root.Signed.Roles[role]
	signed := validSigners(root, role, md)
	if signed == nil {
		signed = []string{}
	}
	return Need{Of: of, Threshold: rl.Threshold, Keys: slices.Clone(rl.KeyIDs), SignedBy: signed}
}

func renewHint(role, dir string) string {
	switch role {
	case metadata.TIMESTAMP:
		return "is the timer running? ('fleetctl repo timestamp " + dir + " --key TIMESTAMP-KEY')"
	case metadata.SNAPSHOT:
		return "'fleetctl repo publish " + dir + " --snapshot-key S --timestamp-key T' re-signs it"
	}
	return "'fleetctl repo renew " + dir + " --role " + role + "', sign it and publish"
}

func roundDur(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	case d >= time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return d.Round(time.Second).String()
}

// rootChanges says what root changes against prev, one line per role
// changed (key ids shortened).
func rootChanges(prev, root *metadata.Metadata[metadata.RootType]) []string {
	var out []string
	for _, role := range Roles {
		rl := root.Signed.Roles[role]
		if prev == nil {
			out = append(out, fmt.Sprintf("%s: %d of keys %s", role, rl.Threshold, shortIDs(rl.KeyIDs)))
			continue
		}
		old := prev.Signed.Roles[role]
		for _, id := range rl.KeyIDs {
			if !slices.Contains(old.KeyIDs, id) {
				out = append(out, fmt.Sprintf("%s: + key %s", role, ShortID(id)))
			}
		}
		for _, id := range old.KeyIDs {
			if !slices.Contains(rl.KeyIDs, id) {
				out = append(out, fmt.Sprintf("%s: - key %s (revoked)", role, ShortID(id)))
			}
		}
		if old.Threshold != rl.Threshold {
			out = append(out, fmt.Sprintf("%s: threshold %d -> %d", role, old.Threshold, rl.Threshold))
		}
	}
	if len(out) == 0 {
		out = append(out, "no key changes (renewed expiry)")
	}
	return out
}

// targetsChanges says what t changes against old, one line per target.
func targetsChanges(old, t *metadata.Metadata[metadata.TargetsType]) []string {
	var prev map[string]*metadata.TargetFiles
	if old != nil {
		prev = old.Signed.Targets
	}
	var out []string
	for _, p := range sortedKeys(t.Signed.Targets) {
		tf := t.Signed.Targets[p]
		c, _, err := checkTarget(p, tf)
		flags := "?"
		if err == nil {
			flags = flagWords(c)
		}
		o, ok := prev[p]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("+ %s %d bytes%s", p, tf.Length, flags))
		case !o.Equal(*tf) || string(rawOf(o)) != string(rawOf(tf)):
			out = append(out, fmt.Sprintf("~ %s%s", p, flags))
		}
	}
	for _, p := range sortedKeys(prev) {
		if _, ok := t.Signed.Targets[p]; !ok {
			out = append(out, "- "+p)
		}
	}
	if len(out) == 0 {
		out = append(out, "no target changes (renewed expiry or new keys)")
	}
	return out
}

func rawOf(tf *metadata.TargetFiles) []byte {
	if tf.Custom == nil {
		return nil
	}
	return *tf.Custom
}

func flagWords(c Custom) string {
	s := ""
	if c.Security {
		s += " security"
	}
	if c.EndOfLife {
		s += " end_of_life"
	}
	if c.Notes != "" {
		s += fmt.Sprintf(" notes=%q", c.Notes)
	}
	if s != "" {
		s = " [" + s[1:] + "]"
	}
	return s
}
