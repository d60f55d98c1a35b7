package main

import (
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/profdiff"
)

// report is dnsperf.json.
type report struct {
	Provenance *evalrun.Provenance `json:"provenance"`
	Command    string              `json:"command"`
	Tools      tools               `json:"tools"`
	Host       host                `json:"host"`
	Params     jsonPar             `json:"params"`
	Corefile   string              `json:"corefile"`
	Commands   []string            `json:"commands"` // the CoreDNS and dnsperf command lines, in order

	ExpectedBytes int           `json:"expected_response_bytes"`
	Coral         responseShape `json:"coral_response"`
	File          responseShape `json:"file_response"`
	// Whoami is the floor's: whoami's answer, its own size.
	Whoami responseShape `json:"whoami_response"`

	Warmup     []*run           `json:"warmup_runs"`
	Throughput []*run           `json:"throughput_runs"`
	LatRuns    []*run           `json:"latency_runs"`
	Summary    throughputResult `json:"throughput"`
	Latency    latencyResult    `json:"latency"`
	HotPath    hotPath          `json:"hot_path"`
	Profiles   []string         `json:"cpu_profiles,omitempty"`
	// ProfileDiff: with -profile, where coral's CPU per query goes beyond
	// whoami's.
	ProfileDiff *profdiff.Comparison `json:"profile_diff,omitempty"`

	PassRatio bool `json:"pass_qps_ratio_ge_0_8"`
	// PassWhoami is issue 25's: coral ≥ 0.9× whoami's unthrottled qps,
	// median over rounds of the per-round ratio.
	PassWhoami  bool    `json:"pass_coral_ge_0_9_whoami"`
	PassP99     bool    `json:"pass_coral_p99_lt_5ms_at_20k"`
	PassHotPath bool    `json:"pass_hot_path"`
	Wall        float64 `json:"wall_seconds"`
}

type tools struct {
	Throughput string `json:"throughput"`
	Latency    string `json:"latency"`
	Metrics    string `json:"metrics"`
	CoreDNS    string `json:"coredns_version"`
	Dnsperf    string `json:"dnsperf_version"`
}

type host struct {
	CPUs          int    `json:"cpus"`
	Kernel        string `json:"kernel"`
	LoadAvgBefore string `json:"loadavg_before"`
	LoadAvgAfter  string `json:"loadavg_after"`
	GoVersion     string `json:"go_version"`
}

// jsonPar is params as the JSON records them.
type jsonPar struct {
	Server    string `json:"server"`
	Client    string `json:"client"`
	Names     int    `json:"names_per_zone"`
	Rounds    int    `json:"rounds"`
	Duration  string `json:"run_duration"`
	Slices    int    `json:"throughput_slices"` // a throughput run is this many interleaved dnsperf runs
	Warmup    string `json:"warmup_duration"`
	Idle      string `json:"idle_duration"`
	Clients   int    `json:"dnsperf_clients"`
	Threads   int    `json:"dnsperf_threads"`
	Queue     int    `json:"dnsperf_outstanding"`
	Rate      int    `json:"latency_qps"`
	Rates     []int  `json:"latency_sweep_qps"`
	LatDur    string `json:"latency_run_duration"`
	LatQueue  int    `json:"latency_outstanding"`
	Quiet     string `json:"quiet_wait_max"`
	Explicit  bool   `json:"static_zone_explicit_names"`
	Proxies   int    `json:"dsht_http_proxies"`
	NameSrvrs int    `json:"dsht_name_servers"`
}

// responseShape is one zone's answer to a sample query, as received.
type responseShape struct {
	Zone       string `json:"zone"`
	Query      string `json:"sample_query"`
	Bytes      int    `json:"bytes"`
	Answer     int    `json:"answer_records"`
	Authority  int    `json:"authority_records"`
	Additional int    `json:"additional_records"`
	Shape      string `json:"shape"`
	Text       string `json:"text"`
}

// run is one dnsperf run with what CoreDNS did meanwhile, or, with -slices
// K > 1, a zone's throughput run of a round: its K slices merged (see
// mergeSlices), the slices themselves in Slices.
type run struct {
	Phase  string `json:"phase"` // warmup, throughput, latency, profile
	Round  int    `json:"round,omitempty"`
	Slice  int    `json:"slice,omitempty"`      // 1..K: which slice of its round a throughput slice is
	Target string `json:"target"`               // coral, file or whoami
	Rate   int    `json:"target_qps,omitempty"` // dnsperf -Q; 0: unthrottled
	Argv   string `json:"dnsperf_command"`

	// Before the run: how long it waited for the machine to be quiet, and
	// the CPUs other processes used in the last second of that. With
	// slices only a round's first run waits: 0 and 0 for the others.
	QuietWait  float64 `json:"quiet_wait_s"`
	BusyBefore float64 `json:"other_cpus_before"`

	Sent       int64            `json:"queries_sent"`
	Completed  int64            `json:"queries_completed"`
	Lost       int64            `json:"queries_lost"`
	Rcodes     map[string]int64 `json:"response_codes"`
	ReqSize    int              `json:"avg_request_bytes"`
	RespSize   int              `json:"avg_response_bytes"`
	RunTime    float64          `json:"run_time_s"`
	QPS        float64          `json:"qps"`
	AvgLatMs   float64          `json:"dnsperf_avg_latency_ms"`
	MinLatMs   float64          `json:"dnsperf_min_latency_ms"`
	MaxLatMs   float64          `json:"dnsperf_max_latency_ms"`
	StdDevMs   float64          `json:"dnsperf_latency_stddev_ms"`
	Timeouts   int64            `json:"verbose_timeouts,omitempty"`
	Interrupts int64            `json:"verbose_interrupted,omitempty"`

	CorednsCPU  float64 `json:"coredns_cpu_s"`
	CPUPerQuery float64 `json:"coredns_cpu_us_per_query"`
	DnsperfCPU  float64 `json:"dnsperf_cpu_s"`
	SelfCPU     float64 `json:"this_process_cpu_s"` // the five DSHT nodes, scraping
	OtherCPU    float64 `json:"other_processes_cpu_s"`
	Wall        float64 `json:"wall_s"`
	// UDP datagrams the kernel dropped at a full receive buffer during the
	// run (machine-wide, /proc/net/snmp RcvbufErrors): CoreDNS's socket or
	// dnsperf's.
	RcvbufDrops int64 `json:"udp_rcvbuf_drops"`

	// From CoreDNS's own metrics over the run.
	ServerRequests float64 `json:"server_requests"`     // coredns_dns_requests_total for the zone
	ServerMeanUs   float64 `json:"server_mean_us"`      // coredns_dns_request_duration_seconds, mean
	DHTOut         float64 `json:"dsht_requests_sent"`  // by the coral node
	Classified     float64 `json:"coral_cache_classif"` // coral classifications from the cache

	// Coral's runs only: the sample answer's shape right after the run,
	// with its name servers, and what the coral node knew then (live name
	// servers by level, DSHT RPCs unanswered during the run), so that an
	// answer that shrank says what it lost and why.
	After       string             `json:"sample_after,omitempty"`
	LiveNS      map[string]float64 `json:"live_nameservers_after,omitempty"`
	DHTTimeouts float64            `json:"dsht_timeouts,omitempty"`

	// The dnsperf runs a merged throughput run is made of, in the order
	// they ran (-slices K > 1; none otherwise).
	Slices []*run `json:"slices,omitempty"`

	latencies []float64 // ms, every response, sorted (verbose runs)
}

type throughputResult struct {
	CoralQPS    []float64 `json:"coral_qps"`
	FileQPS     []float64 `json:"file_qps"`
	WhoamiQPS   []float64 `json:"whoami_qps"`
	Ratios      []float64 `json:"coral_over_file_by_round"`
	MedianCoral float64   `json:"median_coral_qps"`
	MedianFile  float64   `json:"median_file_qps"`
	MedianRatio float64   `json:"median_ratio"`
	// coral's qps over whoami's, the floor (issue 25), per round and the
	// median.
	WhoamiRatios      []float64 `json:"coral_over_whoami_by_round"`
	MedianWhoami      float64   `json:"median_whoami_qps"`
	MedianWhoamiRatio float64   `json:"median_coral_over_whoami"`
	// Per round whoami's CoreDNS CPU per query over coral's (1: an answer
	// costs CoreDNS what whoami's does), and the median: on a busy machine
	// it varies less than qps.
	WhoamiCPURatios      []float64 `json:"whoami_over_coral_cpu_per_query_by_round"`
	MedianWhoamiCPURatio float64   `json:"median_whoami_over_coral_cpu_per_query"`
	CoralCPUPerQ         float64   `json:"median_coral_cpu_us_per_query"`
	FileCPUPerQ          float64   `json:"median_file_cpu_us_per_query"`
	WhoamiCPUPerQ        float64   `json:"median_whoami_cpu_us_per_query"`
	CoralServerUs        float64   `json:"median_coral_server_mean_us"`
	FileServerUs         float64   `json:"median_file_server_mean_us"`
	WhoamiServerUs       float64   `json:"median_whoami_server_mean_us"`
}

// latencyResult holds the paced runs: at the acceptance rate, and at every
// rate of the sweep (the acceptance rate included), lowest first.
type latencyResult struct {
	Rate   int            `json:"target_qps"`
	Coral  *latencyRun    `json:"coral"`
	File   *latencyRun    `json:"file"`
	Whoami *latencyRun    `json:"whoami"`
	Sweep  []latencyPoint `json:"by_rate"`
}

type latencyPoint struct {
	Rate   int         `json:"target_qps"`
	Coral  *latencyRun `json:"coral"`
	File   *latencyRun `json:"file"`
	Whoami *latencyRun `json:"whoami"`
}

type latencyRun struct {
	AchievedQPS float64 `json:"achieved_qps"`
	Sent        int64   `json:"sent"`
	Responses   int     `json:"responses_timed"`
	Lost        int64   `json:"lost"`
	LossRate    float64 `json:"loss_rate"`
	P50         float64 `json:"p50_ms"`
	P90         float64 `json:"p90_ms"`
	P99         float64 `json:"p99_ms"`
	P999        float64 `json:"p99_9_ms"`
	Max         float64 `json:"max_ms"`
	Mean        float64 `json:"mean_ms"`
	// Percentiles[i] is the i-th percentile, i = 0..100.
	Percentiles []float64 `json:"percentiles_ms"`
	CPUPerQuery float64   `json:"coredns_cpu_us_per_query"`
	OtherCPU    float64   `json:"other_processes_cpu_s"`
	RcvbufDrops int64     `json:"udp_rcvbuf_drops"`

	latencies []float64
}

// hotPath is what the metrics say about the load's effect on probes and the
// DSHT: deltas from just before the first load run to just after the last.
type hotPath struct {
	Window          float64            `json:"window_s"`
	CoralQueries    float64            `json:"coral_queries"` // coredns_coral_queries_total
	Classifications map[string]float64 `json:"classifications_by_source"`
	Probes          map[string]float64 `json:"probes_by_outcome"`
	SyncAnswers     float64            `json:"sync_answers"`
	Lookups         float64            `json:"dsht_lookups"`
	DHTOutByType    map[string]float64 `json:"dsht_requests_sent_by_type"`

	// DSHT requests sent by the coral node while coral was under load,
	// while file was (coral idle, same lengths), and in the idle window.
	CoralLoadSeconds float64            `json:"coral_load_s"`
	CoralLoadDHT     float64            `json:"dsht_requests_during_coral_load"`
	FileLoadSeconds  float64            `json:"file_load_s"`
	FileLoadDHT      float64            `json:"dsht_requests_during_file_load"`
	IdleSeconds      float64            `json:"idle_s"`
	IdleDHT          float64            `json:"dsht_requests_idle"`
	DHTInByType      map[string]float64 `json:"dsht_requests_received_by_type"`

	WarmProbes  map[string]float64 `json:"warm_up_probes_by_outcome"`
	WarmSources map[string]float64 `json:"warm_up_classifications_by_source"`

	// Every run's answers kept the shape and size of the sample.
	PassAnswers bool     `json:"pass_answers_unchanged"`
	PassNoProbe bool     `json:"pass_no_probe_or_probe_wait"`
	PassNoSync  bool     `json:"pass_no_sync_answer_or_lookup"`
	PassDHTRate bool     `json:"pass_dsht_rate_not_above_idle"`
	Problems    []string `json:"problems,omitempty"`
}
