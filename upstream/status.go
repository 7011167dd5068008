package upstream

// BudgetLeft reports the outbound budget's tokens left in the current
// minute and day (-1: that window is unlimited). ok is false when the
// budget cannot tell. In cluster mode the figures are the account-wide
// ones as of the last Redis answer.
func (c *Client) BudgetLeft() (minute, day int64, ok bool) {
	tr, ok := c.budget.(tokenReporter)
	if !ok {
		return 0, 0, false
	}
	minute, day = tr.tokens()
	return minute, day, true
}

// BudgetLimits returns the configured per-minute and per-day budget, the
// plan preset applied (0: unlimited).
func (c *Client) BudgetLimits() (perMinute, perDay int) {
	b := c.cfg.Budget.Resolved()
	return b.PerMinute, b.PerDay
}
