// Command bulkserver is an instant-answering bulk endpoint for client benchmarks: it reads each
// `_bulk` request, parses only the action lines, and answers every item as created, in
// OpenSearch's response format. `GET /` answers like an OpenSearch 2.19 node. It stores
// nothing, so its cost does not grow with the run, and it prints the number of documents it
// accepted when it gets SIGTERM or SIGINT.
//
// Like OpenSearch, it honours `filter_path` on `_bulk` (the subset bulk clients send: `took`,
// `errors`, and `items.*.FIELD` for the item fields, `error.type`/`error.reason` included),
// so a client that asks for a smaller response gets one, and a client that does not (such
// as opensearch-go's BulkIndexer, which has no such option) gets the full one.
//
//	bulkserver -listen 127.0.0.1:9290
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
)

var accepted atomic.Int64

type action map[string]struct {
	Index string `json:"_index"`
	ID    string `json:"_id"`
}

// filter is what a `filter_path` keeps of a bulk response: the top-level fields and the
// item fields (nil: everything).
type filter map[string]bool

func parseFilter(r *http.Request) filter {
	fp := r.URL.Query().Get("filter_path")
	if fp == "" {
		return nil
	}
	f := filter{}
	for _, p := range strings.Split(fp, ",") {
		p = strings.TrimSpace(p)
		if rest, ok := strings.CutPrefix(p, "items.*."); ok {
			f[rest] = true
			f["items"] = true
		} else {
			f[p] = true
		}
	}
	return f
}

func (f filter) keep(field string) bool { return f == nil || f[field] }

// item writes one successful item's answer with the fields f keeps, in OpenSearch's order.
func (f filter) item(out *bytes.Buffer, op, index, id, result string, seqNo, status int) {
	fmt.Fprintf(out, `{%q:{`, op)
	n := 0
	field := func(name, format string, v any) {
		if !f.keep(name) {
			return
		}
		if n > 0 {
			out.WriteByte(',')
		}
		n++
		fmt.Fprintf(out, `%q:`+format, name, v)
	}
	field("_index", "%q", index)
	field("_id", "%q", id)
	field("_version", "%d", 1)
	field("result", "%q", result)
	field("_shards", "%s", `{"total":1,"successful":1,"failed":0}`)
	field("_seq_no", "%d", seqNo)
	field("_primary_term", "%d", 1)
	field("status", "%d", status)
	out.WriteString("}}")
}

func bulk(w http.ResponseWriter, r *http.Request) {
	f := parseFilter(r)
	defaultIndex := ""
	if p := strings.TrimPrefix(r.URL.Path, "/"); strings.HasSuffix(p, "/_bulk") {
		defaultIndex = strings.TrimSuffix(p, "/_bulk")
	}
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 0, 1<<20), 100<<20)
	var out bytes.Buffer
	out.WriteByte('{')
	sep := ""
	if f.keep("took") {
		out.WriteString(`"took":1`)
		sep = ","
	}
	if f.keep("errors") {
		out.WriteString(sep + `"errors":false`)
		sep = ","
	}
	if f.keep("items") {
		out.WriteString(sep + `"items":[`)
	}
	items := 0
	expectSource := false
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if expectSource {
			expectSource = false
			continue
		}
		var a action
		if err := json.Unmarshal(line, &a); err != nil {
			http.Error(w, fmt.Sprintf(`{"error":"bad action line: %v","status":400}`, err), http.StatusBadRequest)
			return
		}
		for op, meta := range a {
			index := meta.Index
			if index == "" {
				index = defaultIndex
			}
			if items > 0 && f.keep("items") {
				out.WriteByte(',')
			}
			status, result := 201, "created"
			if op == "delete" {
				status, result = 200, "deleted"
			} else {
				expectSource = true
			}
			if op == "update" {
				status, result = 200, "updated"
			}
			if f.keep("items") {
				f.item(&out, op, index, meta.ID, result, items, status)
			}
			items++
		}
	}
	if err := sc.Err(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if f.keep("items") {
		out.WriteByte(']')
	}
	out.WriteByte('}')
	accepted.Add(int64(items))
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_, _ = w.Write(out.Bytes())
}

func root(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.Error(w, `{"error":"not found","status":404}`, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_, _ = w.Write([]byte(`{"name":"bench","cluster_name":"bench","version":{"distribution":"opensearch","number":"2.19.6"},"tagline":"The OpenSearch Project: https://opensearch.org/"}`))
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9290", "address to listen on")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/_bulk") || r.URL.Path == "/_bulk" {
			bulk(w, r)
			return
		}
		root(w, r)
	})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		fmt.Printf("accepted %d\n", accepted.Load())
		os.Exit(0)
	}()
	log.Fatal(http.ListenAndServe(*listen, mux))
}
