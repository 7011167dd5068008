package h1

// LoopGuests returns how many connections of another lane (HTTP/2) wait
// on s's event loops.
func LoopGuests(s *Server) int {
	s.mu.Lock()
	loops := s.loops
	s.mu.Unlock()
	if len(loops) == 0 {
		return 0
	}
	n := 0
	for i := range loops[0].set.conns {
		if c := loops[0].set.conns[i].Load(); c != nil {
			c.lmu.Lock()
			if c.guest != nil && c.lp.Load() != nil {
				n++
			}
			c.lmu.Unlock()
		}
	}
	return n
}
