package h1

// LoopsDone returns the channel closed once s's event loops have all
// closed, or nil when s runs none.
func LoopsDone(s *Server) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loopsDone
}
