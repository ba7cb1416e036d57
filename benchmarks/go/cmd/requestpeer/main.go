// Command requestpeer runs the request load of `searchwire request --for` with a Go client,
// the peers searchwire's transport is measured against: opensearch-go v4.8.1 or
// go-elasticsearch v8 (elastic-transport-go). C goroutines each send `GET PATH` in a closed
// loop (the next request when the previous one has finished) until DUR has passed, read each
// body to the end, and record each request's latency. It prints one JSON object with the
// fields of searchwire's summary: requests, ok, failed, latency_ms (p50, p90, p99, max;
// nearest rank), wall_s, requests_per_s, cpu_s (user, system, total: getrusage of this
// process over the load), requests_per_cpu_s.
//
//	requestpeer -client opensearch-go -urls http://127.0.0.1:9201,... -for 10s -concurrency 8
//
// Both clients keep their defaults (round robin, dead-node backoff, no retry backoff, 3
// retries) except: 429 is retried like 502/503/504 (as searchwire does), and the HTTP
// transport keeps as many idle connections per host as there are goroutines (Go's default of
// 2 would make most requests open a new connection at concurrency 8). go-elasticsearch is
// used through its transport (`Client.Transport.Perform`): its product check refuses a
// server without the `X-Elastic-Product` header, which the fake cluster does not send.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
	"github.com/opensearch-project/opensearch-go/v4"
)

type cpu struct {
	User   float64 `json:"user"`
	System float64 `json:"system"`
	Total  float64 `json:"total"`
}

func cpuNow() cpu {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	secs := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	u, s := secs(ru.Utime), secs(ru.Stime)
	return cpu{u, s, u + s}
}

type latency struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

type summary struct {
	Client          string         `json:"client"`
	Requests        int            `json:"requests"`
	OK              int            `json:"ok"`
	Failed          int            `json:"failed"`
	Errors          map[string]int `json:"errors"`
	LatencyMs       latency        `json:"latency_ms"`
	WallS           float64        `json:"wall_s"`
	RequestsPerS    float64        `json:"requests_per_s"`
	CPUS            cpu            `json:"cpu_s"`
	RequestsPerCPUS float64        `json:"requests_per_cpu_s"`
}

type performer func(*http.Request) (*http.Response, error)

func newClient(name string, urls []string, conc int) (performer, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = conc
	retryOn := []int{http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout}
	switch name {
	case "opensearch-go":
		c, err := opensearch.NewClient(opensearch.Config{
			Addresses:     urls,
			RetryOnStatus: retryOn,
			MaxRetries:    3,
			Transport:     transport,
		})
		if err != nil {
			return nil, err
		}
		return c.Perform, nil
	case "go-elasticsearch":
		c, err := elasticsearch.NewClient(elasticsearch.Config{
			Addresses:     urls,
			RetryOnStatus: retryOn,
			MaxRetries:    3,
			Transport:     transport,
		})
		if err != nil {
			return nil, err
		}
		return c.Transport.Perform, nil
	}
	return nil, fmt.Errorf("unknown -client %q (opensearch-go or go-elasticsearch)", name)
}

// nearestRank is the p-th percentile of ascending v in milliseconds (rank ceil(p/100 n)).
func nearestRank(v []time.Duration, p int) float64 {
	if len(v) == 0 {
		return 0
	}
	rank := int(math.Ceil(float64(p) * float64(len(v)) / 100))
	rank = max(1, min(rank, len(v)))
	return float64(v[rank-1].Microseconds()) / 1000
}

func main() {
	name := flag.String("client", "opensearch-go", "opensearch-go or go-elasticsearch")
	urls := flag.String("urls", "", "comma-separated node URLs")
	path := flag.String("path", "/", "request path")
	dur := flag.Duration("for", 10*time.Second, "how long to keep starting requests")
	conc := flag.Int("concurrency", 1, "requests in flight at once")
	flag.Parse()
	if *urls == "" || *conc < 1 {
		fmt.Fprintln(os.Stderr, "requestpeer: -urls and a -concurrency of at least 1 are required")
		os.Exit(2)
	}
	perform, err := newClient(*name, strings.Split(*urls, ","), *conc)
	if err != nil {
		fmt.Fprintln(os.Stderr, "requestpeer:", err)
		os.Exit(2)
	}

	type result struct {
		lat    []time.Duration
		ok     int
		errors map[string]int
	}
	results := make([]result, *conc)
	cpu0, start := cpuNow(), time.Now()
	end := start.Add(*dur)
	var wg sync.WaitGroup
	for w := 0; w < *conc; w++ {
		wg.Add(1)
		go func(r *result) {
			defer wg.Done()
			r.errors = map[string]int{}
			for time.Now().Before(end) {
				t := time.Now()
				req, _ := http.NewRequest(http.MethodGet, *path, nil)
				res, err := perform(req)
				kind := ""
				if err != nil {
					kind = "transport"
				} else {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode >= 400 {
						kind = fmt.Sprintf("status %d", res.StatusCode)
					}
				}
				r.lat = append(r.lat, time.Since(t))
				if kind == "" {
					r.ok++
				} else {
					r.errors[kind]++
				}
			}
		}(&results[w])
	}
	wg.Wait()
	wall := time.Since(start).Seconds()
	c := cpuNow()
	used := cpu{c.User - cpu0.User, c.System - cpu0.System, c.Total - cpu0.Total}

	var all []time.Duration
	s := summary{Client: *name, Errors: map[string]int{}, WallS: wall, CPUS: used}
	for _, r := range results {
		all = append(all, r.lat...)
		s.OK += r.ok
		for k, v := range r.errors {
			s.Errors[k] += v
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	s.Requests = len(all)
	s.Failed = s.Requests - s.OK
	s.LatencyMs = latency{nearestRank(all, 50), nearestRank(all, 90), nearestRank(all, 99), nearestRank(all, 100)}
	s.RequestsPerS = float64(s.Requests) / wall
	if used.Total > 0 {
		s.RequestsPerCPUS = float64(s.Requests) / used.Total
	}
	out, _ := json.Marshal(s)
	fmt.Println(string(out))
}
