package main

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// sampleEvery is how often an inFlightSampler looks at the receiver.
const sampleEvery = 250 * time.Millisecond

// inFlightSampler follows one receiver endpoint's requests in flight over a
// run: every sampleEvery it takes the most held at once since the last look
// (the receiver keeps that peak, so a burst between looks is not missed),
// and it keeps the most of each second. With one worker process that is
// the adaptive limit at work, as the receiver sees it.
type inFlightSampler struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu        sync.Mutex
	perSecond []int // second since the start -> most requests in flight at once
}

// sampleInFlight starts following endpoint name of r.
func sampleInFlight(r *receiver, name string) *inFlightSampler {
	s := &inFlightSampler{stop: make(chan struct{})}
	r.TakePeak(name) // a fresh window
	start := time.Now()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case now := <-tick.C:
				s.add(int(now.Sub(start)/time.Second), r.TakePeak(name))
			}
		}
	}()
	return s
}

func (s *inFlightSampler) add(sec, peak int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.perSecond) <= sec {
		s.perSecond = append(s.perSecond, 0)
	}
	s.perSecond[sec] = max(s.perSecond[sec], peak)
}

// Stop ends the sampling and returns the most in flight of each second.
func (s *inFlightSampler) Stop() []int {
	close(s.stop)
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.perSecond
}

// inFlightTable writes per-second maxima as a compact table for a report
// note: "second → most in flight: 0→10 1→20 …", a trailing run of idle
// seconds left out.
func inFlightTable(perSecond []int) string {
	end := len(perSecond)
	for end > 0 && perSecond[end-1] == 0 {
		end--
	}
	parts := make([]string, end)
	for i, v := range perSecond[:end] {
		parts[i] = fmt.Sprintf("%d→%d", i, v)
	}
	return "second → most in flight: " + strings.Join(parts, " ")
}
