// Command compat-go drives two unmodified Go bulk clients of Elasticsearch against one
// endpoint, as an application uses them:
//
//	compat-go docappender URL INDEX   Elastic's go-docappender v2 BulkIndexer (the bulk
//	                                  engine of APM Server and of the OpenTelemetry
//	                                  Collector's Elasticsearch exporter), gzip on, its
//	                                  default filter_path
//	compat-go esutil URL INDEX        go-elasticsearch v8's esutil.BulkIndexer
//
// Both first make the ordinary calls through go-elasticsearch's client (which checks
// X-Elastic-Product on every answer): Info, an index template for INDEX (3 shards, 1
// replica, `id` keyword, `n` long) and the index. They then write documents {"id":
// "doc-NNNNNN", "n": N, "msg": ...} with `_id` "doc-NNNNNN" and the `create` action at about
// COMPAT_RATE (default 100) per second until a line "stop" arrives on stdin (or 20,000
// documents, or 300 s), print "written", wait for a line "search", then refresh, search and
// count the index and print a JSON summary as the last line. The line protocol (progress N,
// acked ID, written, the summary) is described in compat/README.md.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elastic/go-docappender/v2"
	"github.com/elastic/go-elasticsearch/v8"
	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/elastic/go-elasticsearch/v8/esutil"
	"github.com/klauspost/compress/gzip"
)

const (
	maxDocs    = 20000
	maxSeconds = 300
)

var outMu sync.Mutex

func emit(format string, args ...any) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

// control follows the driving test's lines on stdin.
type control struct {
	stop, search chan struct{}
}

func newControl() *control {
	c := &control{stop: make(chan struct{}), search: make(chan struct{})}
	go func() {
		var stopOnce, searchOnce sync.Once
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			switch strings.TrimSpace(sc.Text()) {
			case "stop":
				stopOnce.Do(func() { close(c.stop) })
			case "search":
				searchOnce.Do(func() { close(c.search) })
			}
		}
		// stdin closed: the test is gone.
		stopOnce.Do(func() { close(c.stop) })
		searchOnce.Do(func() { close(c.search) })
	}()
	return c
}

func (c *control) stopped() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

type doc struct {
	id   string
	body []byte
}

// documents calls fn for each paced document until stopped; returns how many.
func documents(c *control, rate float64, fn func(doc)) int {
	start := time.Now()
	n := 0
	for !c.stopped() && n < maxDocs && time.Since(start) < maxSeconds*time.Second {
		id := fmt.Sprintf("doc-%06d", n)
		body, _ := json.Marshal(map[string]any{"id": id, "n": n, "msg": fmt.Sprintf("small document %d", n)})
		fn(doc{id, body})
		n++
		if n%50 == 0 {
			emit("progress %d", n)
		}
		// Paced by the clock, so slow answers do not lower the total.
		if ahead := time.Until(start.Add(time.Duration(float64(n) / rate * float64(time.Second)))); ahead > 0 {
			time.Sleep(ahead)
		}
	}
	emit("progress %d", n)
	return n
}

// call runs an esapi request and returns its decoded JSON answer, or an "error: ..." string.
func call(res *esapi.Response, err error) (map[string]any, string) {
	if err != nil {
		return nil, "error: " + err.Error()
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.IsError() {
		return nil, fmt.Sprintf("error: status %d: %.400s", res.StatusCode, raw)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Sprintf("error: not JSON (%v): %.400s", err, raw)
	}
	return v, ""
}

func acknowledged(res *esapi.Response, err error) any {
	v, e := call(res, err)
	if e != "" {
		return e
	}
	return v["acknowledged"]
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: compat-go docappender|esutil URL INDEX")
		os.Exit(2)
	}
	mode, url, index := os.Args[1], os.Args[2], os.Args[3]
	rate := 100.0
	if r, err := strconv.ParseFloat(os.Getenv("COMPAT_RATE"), 64); err == nil && r > 0 {
		rate = r
	}
	ctl := newControl()
	summary := map[string]any{"mode": mode}

	es, err := elasticsearch.NewClient(elasticsearch.Config{Addresses: []string{url}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	summary["client"] = "go-elasticsearch " + elasticsearch.Version
	if info, e := call(es.Info()); e != "" {
		summary["info"] = e
	} else if v, ok := info["version"].(map[string]any); ok {
		summary["info"] = v["number"]
	}
	template := `{"index_patterns":["` + index + `"],"template":{"settings":{"number_of_shards":3,"number_of_replicas":1},` +
		`"mappings":{"properties":{"id":{"type":"keyword"},"n":{"type":"long"}}}}}`
	summary["template"] = acknowledged(es.Indices.PutIndexTemplate(index+"-template", strings.NewReader(template)))
	summary["create_index"] = acknowledged(es.Indices.Create(index))

	var errs []string
	switch mode {
	case "docappender":
		summary["client"] = "go-docappender v2 on " + summary["client"].(string)
		errs = writeDocappender(es, index, ctl, rate)
	case "esutil":
		errs = writeEsutil(es, index, ctl, rate)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		os.Exit(2)
	}
	summary["error_count"] = len(errs)
	if len(errs) > 5 {
		errs = errs[:5]
	}
	summary["errors"] = errs

	emit("written")
	<-ctl.search
	if _, e := call(es.Indices.Refresh(es.Indices.Refresh.WithIndex(index))); e != "" {
		summary["refresh"] = e
	} else {
		summary["refresh"] = true
	}
	q := `{"size":0,"track_total_hits":true,"query":{"match_all":{}}}`
	if v, e := call(es.Search(es.Search.WithIndex(index), es.Search.WithBody(strings.NewReader(q)))); e != "" {
		summary["search_total"] = e
	} else {
		summary["search_total"] = v["hits"].(map[string]any)["total"].(map[string]any)["value"]
	}
	if v, e := call(es.Count(es.Count.WithIndex(index))); e != "" {
		summary["count"] = e
	} else {
		summary["count"] = v["count"]
	}
	out, _ := json.Marshal(summary)
	emit("%s", out)
}

// writeDocappender drives docappender's BulkIndexer the way the collector's exporter does:
// items with document ids, flushed as a batch; each flush's answer names the failed
// positions, every other item of the flush was written.
func writeDocappender(es *elasticsearch.Client, index string, ctl *control, rate float64) []string {
	bi, err := docappender.NewBulkIndexer(docappender.BulkIndexerConfig{
		Client: es,
		// docappender's own default is 0 (no compression); the collector's exporter and
		// APM Server send gzip, and so does this program.
		CompressionLevel: gzip.DefaultCompression,
	})
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	var errs []string
	var batch []string
	lastFlush := time.Now()
	flush := func() {
		if len(batch) == 0 {
			return
		}
		stat, err := bi.Flush(context.Background())
		if err != nil {
			errs = append(errs, fmt.Sprintf("flush of %d documents: %v", len(batch), err))
		} else {
			failed := map[int]bool{}
			for _, f := range stat.FailedDocs {
				failed[f.Position] = true
				errs = append(errs, fmt.Sprintf("%s: %d %s: %s", batch[f.Position], f.Status, f.Error.Type, f.Error.Reason))
			}
			for i, id := range batch {
				if !failed[i] {
					emit("acked %s", id)
				}
			}
		}
		batch = batch[:0]
		lastFlush = time.Now()
	}
	documents(ctl, rate, func(d doc) {
		err := bi.Add(docappender.BulkIndexerItem{
			Index:      index,
			DocumentID: d.id,
			Action:     docappender.ActionCreate,
			Body:       bytes.NewReader(d.body),
		})
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: add: %v", d.id, err))
			return
		}
		batch = append(batch, d.id)
		if len(batch) >= 500 || time.Since(lastFlush) >= 500*time.Millisecond {
			flush()
		}
	})
	flush()
	return errs
}

// writeEsutil uses esutil.BulkIndexer with its defaults but a 1 s flush interval (its 30 s
// default would send one bulk per worker in the whole outage): per-item callbacks.
func writeEsutil(es *elasticsearch.Client, index string, ctl *control, rate float64) []string {
	var mu sync.Mutex
	var errs []string
	bi, err := esutil.NewBulkIndexer(esutil.BulkIndexerConfig{
		Client:        es,
		Index:         index,
		FlushInterval: time.Second,
		OnError: func(_ context.Context, err error) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, "bulk: "+err.Error())
		},
	})
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	documents(ctl, rate, func(d doc) {
		err := bi.Add(context.Background(), esutil.BulkIndexerItem{
			Action:     "create",
			DocumentID: d.id,
			Body:       bytes.NewReader(d.body),
			OnSuccess: func(_ context.Context, item esutil.BulkIndexerItem, _ esutil.BulkIndexerResponseItem) {
				emit("acked %s", item.DocumentID)
			},
			OnFailure: func(_ context.Context, item esutil.BulkIndexerItem, r esutil.BulkIndexerResponseItem, err error) {
				mu.Lock()
				defer mu.Unlock()
				errs = append(errs, fmt.Sprintf("%s: %d %s: %s %v", item.DocumentID, r.Status, r.Error.Type, r.Error.Reason, err))
			},
		})
		if err != nil {
			mu.Lock()
			errs = append(errs, fmt.Sprintf("%s: add: %v", d.id, err))
			mu.Unlock()
		}
	})
	if err := bi.Close(context.Background()); err != nil {
		errs = append(errs, "close: "+err.Error())
	}
	mu.Lock()
	defer mu.Unlock()
	return errs
}
