package rollout

// EvalOrder is the order in which to evaluate the groups: the dependency
// order (Order), so a group that finishes lets its successors start in the
// same pass, or the listed order when the config is invalid (Next then holds
// every group and says why).
func (c Config) EvalOrder() []string {
	if order, err := c.Order(); err == nil {
		return order
	}
	names := make([]string, 0, len(c.Groups))
	for _, g := range c.Groups {
		names = append(names, g.Name)
	}
	return names
}
