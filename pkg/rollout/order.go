package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Dependencies returns the groups that must be done before group may start:
// its depends_on, or, when that is nil, the group listed before it (none for
// the first group). An explicit empty depends_on means none.
func (c Config) Dependencies(group string) []string {
	for i, g := range c.Groups {
		if g.Name != group {
			continue
		}
		if g.DependsOn != nil {
			return slices.Clone(g.DependsOn)
		}
		if i == 0 {
			return nil
		}
		return []string{c.Groups[i-1].Name}
	}
	return nil
}

// Ancestors returns every group above group in the depends_on chain: its
// dependencies, theirs, and so on, nearest first (each once, in the order
// Dependencies lists them). A group after a rolled-back or halted ancestor
// does not start (see machine.unstarted). A cycle, which Validate refuses,
// ends the walk instead of looping.
func (c Config) Ancestors(group string) []string {
	seen := map[string]bool{group: true}
	var out []string
	next := c.Dependencies(group)
	for len(next) > 0 {
		var after []string
		for _, d := range next {
			if seen[d] {
				continue
			}
			seen[d] = true
			out = append(out, d)
			after = append(after, c.Dependencies(d)...)
		}
		next = after
	}
	return out
}

// Order returns the group names in dependency order (every group after all
// of its dependencies, ties kept in list order). It fails on an unknown
// dependency or a cycle.
func (c Config) Order() ([]string, error) {
	names := map[string]bool{}
	for _, g := range c.Groups {
		names[g.Name] = true
	}
	for _, g := range c.Groups {
		for _, d := range c.Dependencies(g.Name) {
			if !names[d] {
				return nil, fmt.Errorf("group %q: depends_on %q: no such group", g.Name, d)
			}
		}
	}
	const (
		unvisited = iota
		visiting
		visited
	)
	mark := map[string]int{}
	var order []string
	var path []string
	var visit func(string) error
	visit = func(n string) error {
		switch mark[n] {
		case visited:
			return nil
		case visiting:
			i := slices.Index(path, n)
			cycle := append(slices.Clone(path[i:]), n)
			return fmt.Errorf("dependency cycle %s: a group cannot wait for itself", strings.Join(cycle, " → "))
		}
		mark[n] = visiting
		path = append(path, n)
		for _, d := range c.Dependencies(n) {
			if err := visit(d); err != nil {
				return err
			}
		}
		path = path[:len(path)-1]
		mark[n] = visited
		order = append(order, n)
		return nil
	}
	for _, g := range c.Groups {
		if err := visit(g.Name); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// ChainDelay is the longest time, over every dependency chain, from the
// first group of the chain starting to the last group being able to start,
// if every group finished at once: each group after the first adds its
// wait_hours and the longest gap between two of its windows (24h for daily
// windows, up to 168h for a weekly one), less what its window_length adds
// to the first hour (GroupConfig.chainStep). It returns that delay and the
// chain.
func (c Config) ChainDelay() (time.Duration, []string, error) {
	order, err := c.Order()
	if err != nil {
		return 0, nil, err
	}
	longest := map[string]time.Duration{}
	via := map[string]string{}
	var worst time.Duration
	var worstEnd string
	for _, n := range order {
		deps := c.Dependencies(n)
		if len(deps) == 0 {
			longest[n] = 0
			continue
		}
		g, _ := c.Group(n)
		step := g.chainStep()
		for _, d := range deps {
			if l := longest[d] + step; l > longest[n] || via[n] == "" {
				longest[n], via[n] = l, d
			}
		}
		if longest[n] > worst || worstEnd == "" {
			worst, worstEnd = longest[n], n
		}
	}
	if worstEnd == "" {
		return 0, nil, nil
	}
	chain := []string{worstEnd}
	for n := worstEnd; via[n] != ""; n = via[n] {
		chain = append(chain, via[n])
	}
	slices.Reverse(chain)
	return worst, chain, nil
}

// validateOrder checks dependencies, cycles and the one-week chain limit.
func (c Config) validateOrder() []error {
	delay, chain, err := c.ChainDelay()
	if err != nil {
		return []error{err}
	}
	if delay > MaxChain {
		return []error{fmt.Errorf("dependency chain %s may take %s to reach its last group (wait_hours plus the longest time between windows of each group after the first, less its window_length beyond one hour); the limit is %s (one week): shorten wait_hours, allow more days, or split the chain",
			strings.Join(chain, " → "), Duration(delay), Duration(MaxChain))}
	}
	return nil
}
