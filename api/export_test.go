package api

// Watching is closed once s's key-revocation watch has subscribed and
// dropped the keys cached before: a test that counts on a cached key
// caches it after that.
func (s *Server) Watching() <-chan struct{} { return s.watching }
