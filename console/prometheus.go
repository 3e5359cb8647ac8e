package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// promSeries are the fleet's per-scope series read from Prometheus: the
// idemprom metrics every guard of the fleet exports (idem_messages_total by
// idem_scope and idem_outcome, the idem_records_stale gauge).
var promSeries = []struct {
	Name, Class string
	Gauge       bool // a level, not a count per step: its total is its most
	// Query is the PromQL of the series for a step of %[1]s: summed over
	// the fleet's processes by scope.
	Query string
}{
	{"processed", "s-processed", false, `sum by (idem_scope) (increase(idem_messages_total{idem_outcome=~"processed|reconciled"}[%[1]s]))`},
	{"duplicates", "s-duplicate", false, `sum by (idem_scope) (increase(idem_messages_total{idem_outcome="duplicate"}[%[1]s]))`},
	{"conflicts", "s-conflict", false, `sum by (idem_scope) (increase(idem_messages_total{idem_outcome="conflict"}[%[1]s]))`},
	{"dead letters", "s-deadletter", false, `sum by (idem_scope) (increase(idem_messages_total{idem_outcome=~"conflict|stale|permanent|no_key"}[%[1]s]))`},
	{"held (in progress elsewhere)", "s-inprogress", false, `sum by (idem_scope) (increase(idem_messages_total{idem_outcome="in_progress"}[%[1]s]))`},
	{"stale superseded versions", "s-superseded", false, `sum by (idem_scope) (increase(idem_messages_total{idem_outcome="superseded"}[%[1]s]))`},
	// Every process exporting the store's gauges reports the same records:
	// the largest, not the sum.
	{"stale records (most)", "s-stale", true, `max by (idem_scope) (idem_records_stale)`},
}

// ErrPrometheus wraps every failure to read Prometheus (unreachable, an
// error answer, an answer that is not the query API's).
var ErrPrometheus = errors.New("console: prometheus query failed")

// promClient reads Prometheus's HTTP query API.
type promClient struct {
	base *url.URL
	hc   *http.Client
}

func newPromClient(raw string, hc *http.Client) (*promClient, error) {
	u, err := url.Parse(strings.TrimSuffix(raw, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: Options.Prometheus %q is not an http(s) URL", ErrPrometheus, raw)
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &promClient{base: u, hc: hc}, nil
}

// queryRange runs one range query and returns its series by idem_scope,
// each value at bucket (t - start) / step; buckets without a sample are 0.
func (p *promClient) queryRange(ctx context.Context, query string, start time.Time, step time.Duration, buckets int) (map[string][]float64, error) {
	end := start.Add(step * time.Duration(buckets-1))
	v := url.Values{
		"query": {query},
		"start": {strconv.FormatFloat(float64(start.UnixMilli())/1000, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(float64(end.UnixMilli())/1000, 'f', 3, 64)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}
	u := *p.base
	u.Path += "/api/v1/query_range"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(v.Encode()))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPrometheus, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPrometheus, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 32<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("%w: %s answered %s, not the query API's JSON: %v", ErrPrometheus, p.base.Redacted(), resp.Status, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%w: %s: %s", ErrPrometheus, body.ErrorType, body.Error)
	}
	if body.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("%w: result type %q, want matrix", ErrPrometheus, body.Data.ResultType)
	}
	out := map[string][]float64{}
	for _, r := range body.Data.Result {
		scope := r.Metric["idem_scope"]
		vals := out[scope]
		if vals == nil {
			vals = make([]float64, buckets)
			out[scope] = vals
		}
		for _, pair := range r.Values {
			ts, ok1 := pair[0].(float64)
			s, ok2 := pair[1].(string)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("%w: a sample is not [time, \"value\"]", ErrPrometheus)
			}
			f, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				continue
			}
			i := int(math.Round((ts - float64(start.UnixMilli())/1000) / step.Seconds()))
			if i >= 0 && i < buckets {
				vals[i] += f
			}
		}
	}
	return out, nil
}

// promStep is a step as PromQL spells a duration: whole seconds.
func promStep(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) + "s" }
