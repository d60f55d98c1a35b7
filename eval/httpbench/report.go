package main

import (
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/profdiff"
)

// report is httpbench.json.
type report struct {
	Provenance *evalrun.Provenance `json:"provenance"`
	Command    string              `json:"command"`
	Tools      tools               `json:"tools"`
	Host       host                `json:"host"`
	Params     jsonPar             `json:"params"`
	// Caddyfile is the Caddy's under test, with each respond body (the
	// origin's object, the same in every run) written as its size, path and
	// SHA-256 instead of its bytes.
	Caddyfile string `json:"caddyfile"`
	// BaselineCaddyfile is the -baseline Caddy's (the A/B's old build).
	BaselineCaddyfile string `json:"baseline_caddyfile,omitempty"`
	NginxConf         string `json:"nginx_conf,omitempty"`
	// WrkScript is the Lua script of the TLS targets' wrk runs (-s): it
	// connects to Caddy's address whatever the URL's host.
	WrkScript string   `json:"wrk_script,omitempty"`
	Commands  []string `json:"commands"` // the Caddy, nginx and wrk command lines, in order

	// Responses: one request per target and size before and after the
	// runs, as wrk sends it, counted on the wire.
	Responses []*sample `json:"responses"`

	Warmup     []*run      `json:"warmup_runs"`
	Throughput []*run      `json:"throughput_runs"`
	Disturbed  []*run      `json:"disturbed_runs,omitempty"` // repeated: other processes took CPU
	Summary    []*sizeSumm `json:"by_size"`
	Profiles   []string    `json:"cpu_profiles,omitempty"`
	// ProfileDiffs: with -profile, where a hit's CPU per request goes
	// beyond respond's, per size.
	ProfileDiffs []*profdiff.Comparison `json:"profile_diffs,omitempty"`

	// Large is the large-object section (absent with -large-size 0).
	Large *largeResult `json:"large_object,omitempty"`

	Index *indexResult `json:"index_memory,omitempty"`
	Proxy *proxyResult `json:"proxy_memory,omitempty"`

	Problems  []string `json:"problems,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
	PassRatio bool     `json:"pass_coral_ge_0_9_file"`
	// PassTLSRatio is the same over TLS: coral-tls ≥ 0.9× file-tls for
	// every size (absent without -tls).
	PassTLSRatio *bool `json:"pass_tls_coral_ge_0_9_file,omitempty"`
	// PassRespond is issue 25's: coral ≥ 0.9× respond, Caddy's floor, for
	// every size; PassTLSRespond the same over TLS (absent without -tls).
	PassRespond    bool  `json:"pass_coral_ge_0_9_respond"`
	PassTLSRespond *bool `json:"pass_tls_coral_ge_0_9_respond,omitempty"`
	// PassBaseline is the A/B's: new/old ≥ 1.0 for every size (absent
	// without -baseline).
	PassBaseline *bool   `json:"pass_new_ge_old,omitempty"`
	PassCheck    bool    `json:"pass_checks"`
	Wall         float64 `json:"wall_seconds"`
}

type tools struct {
	Load  string `json:"load"`
	Caddy string `json:"caddy_version"`
	// Baseline is the -baseline binary's path and version.
	Baseline string `json:"baseline_caddy,omitempty"`
	Nginx    string `json:"nginx_version,omitempty"`
	Wrk      string `json:"wrk_version"`
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
	Origin         string `json:"origin"`
	Coral          string `json:"coral_proxy"`
	CoralHost      string `json:"coral_host_header"`
	File           string `json:"file_server"`
	Respond        string `json:"respond"`
	Nginx          string `json:"nginx,omitempty"`
	Baseline       string `json:"baseline_coral_proxy,omitempty"` // the A/B's coral-old: address:port
	TLS            bool   `json:"tls"`
	CoralTLS       string `json:"coral_proxy_tls,omitempty"` // address:port
	CoralTLSName   string `json:"coral_tls_name,omitempty"`  // the URL's host: SNI and Host
	FileTLS        string `json:"file_server_tls,omitempty"`
	FileTLSName    string `json:"file_tls_name,omitempty"`
	RespondTLS     string `json:"respond_tls,omitempty"`
	RespondTLSName string `json:"respond_tls_name,omitempty"`
	Sizes          []int  `json:"object_bytes"`
	Rounds         int    `json:"rounds"`
	Duration       string `json:"run_duration"`
	Slices         int    `json:"slices_per_run"`
	Warmup         string `json:"warmup_duration"`
	Threads        int    `json:"wrk_threads"`
	Conns          int    `json:"wrk_connections"`
	Repeat         int    `json:"repeat_disturbed_max"`
	NginxWorkers   string `json:"nginx_workers,omitempty"`
	IndexObjects   int    `json:"index_objects"`
	ProxyObjects   int    `json:"proxy_objects"`
	ProxySettle    string `json:"proxy_settle"`
	Quiet          string `json:"quiet_wait_max"`
}

// sample is one target's response to one request for an object.
type sample struct {
	When   string `json:"when"` // before, after
	Target string `json:"target"`
	Size   int    `json:"object_bytes"`
	Cache  string `json:"cache_header,omitempty"` // Cache-Status or X-Cache-Status
	Hit    bool   `json:"hit"`
	Same   bool   `json:"body_is_origins"`
	response
}

// run is one wrk run with what the servers did meanwhile.
type run struct {
	Phase  string `json:"phase"` // warmup, throughput, profile
	Round  int    `json:"round,omitempty"`
	Target string `json:"target"` // coral, file, respond, nginx, coral-tls, file-tls, respond-tls, coral-old
	Size   int    `json:"object_bytes"`
	Argv   string `json:"wrk_command"`

	// Before the run: how long it waited for the machine to be quiet, and
	// the CPUs other processes used in the last second of that.
	QuietWait  float64 `json:"quiet_wait_s"`
	BusyBefore float64 `json:"other_cpus_before"`

	Requests         int64   `json:"requests"`
	RunTime          float64 `json:"run_time_s"`
	RPS              float64 `json:"requests_per_s"`
	BytesRead        float64 `json:"bytes_read"` // wrk's, two significant decimals of its unit
	BytesPerResponse float64 `json:"bytes_per_response"`
	TransferMiBs     float64 `json:"transfer_mib_per_s"`
	AvgLatMs         float64 `json:"latency_avg_ms"`
	StdevLatMs       float64 `json:"latency_stdev_ms"`
	MaxLatMs         float64 `json:"latency_max_ms"`
	P50              float64 `json:"latency_p50_ms"`
	P75              float64 `json:"latency_p75_ms"`
	P90              float64 `json:"latency_p90_ms"`
	P99              float64 `json:"latency_p99_ms"`
	ErrConnect       int64   `json:"socket_errors_connect"`
	ErrRead          int64   `json:"socket_errors_read"`
	ErrWrite         int64   `json:"socket_errors_write"`
	ErrTimeout       int64   `json:"socket_errors_timeout"`
	Non2xx           int64   `json:"non_2xx_3xx"`

	// The origin's requests for the benchmark objects during the run: 0
	// when every response was a cache hit.
	OriginRequests int64 `json:"origin_requests"`
	// coral_proxy's own count of the requests it handled during the run,
	// by cache status (caddy_coral_requests_total): all hits, at least as
	// many as wrk completed (wrk does not count those cut off at its end).
	CoralRequests map[string]float64 `json:"coral_requests_by_cache_status,omitempty"`

	ServerCPU     float64 `json:"server_cpu_s"` // the target's server: Caddy, or nginx's master and workers
	CPUPerRequest float64 `json:"server_cpu_us_per_request"`
	IdleServerCPU float64 `json:"idle_server_cpu_s"` // the other servers, not under load
	WrkCPU        float64 `json:"wrk_cpu_s"`
	SelfCPU       float64 `json:"this_process_cpu_s"`
	OtherCPU      float64 `json:"other_processes_cpu_s"`
	Wall          float64 `json:"wall_s"`
	// Other processes used over disturbedCores during this run or another
	// of its round and size, and -repeat was exhausted.
	Disturbed bool `json:"disturbed,omitempty"`
	// With -slices K > 1, the K wrk runs this run merges (mergeSlices),
	// in the order they ran.
	Slices []*run `json:"slices,omitempty"`
}

// sizeSumm is one object size's result: medians over rounds.
type sizeSumm struct {
	Size    int                    `json:"object_bytes"`
	Targets map[string]*targetSumm `json:"targets"`
	// Per round, coral's req/s over file's; its median is the acceptance.
	Ratios      []float64 `json:"coral_over_file_by_round"`
	MedianRatio float64   `json:"median_coral_over_file"`
	// Per round, coral's req/s over respond's, Caddy's floor (issue 25),
	// the median, and whether it meets the acceptance.
	RespondRatios      []float64 `json:"coral_over_respond_by_round"`
	MedianRespondRatio float64   `json:"median_coral_over_respond"`
	PassRespond        bool      `json:"pass_respond"`
	// Per round, respond's server CPU per request over coral's (1: a hit
	// costs Caddy what respond does), and the median: on a busy machine it
	// varies less than req/s.
	RespondCPURatios      []float64 `json:"respond_over_coral_cpu_per_request_by_round"`
	MedianRespondCPURatio float64   `json:"median_respond_over_coral_cpu_per_request"`
	// Per round, coral's req/s over respond-head's (respond with a
	// coral_proxy hit's header fields: the floor of the same response),
	// and the median; and the same for server CPU per request,
	// respond-head's over coral's. No acceptance: they separate the
	// handler's own work from what the fields of a cache's response cost.
	RespondHeadRatios      []float64 `json:"coral_over_respond_head_by_round,omitempty"`
	MedianRespondHeadRatio float64   `json:"median_coral_over_respond_head,omitempty"`
	RespondHeadCPURatios   []float64 `json:"respond_head_over_coral_cpu_per_request_by_round,omitempty"`
	MedianRespondHeadCPU   float64   `json:"median_respond_head_over_coral_cpu_per_request,omitempty"`
	// nginx's over file's, and coral's over nginx's.
	NginxRatios      []float64 `json:"nginx_over_file_by_round,omitempty"`
	MedianNginxRatio float64   `json:"median_nginx_over_file,omitempty"`
	CoralNginxRatios []float64 `json:"coral_over_nginx_by_round,omitempty"`
	CoralOverNginx   float64   `json:"median_coral_over_nginx,omitempty"`
	Pass             bool      `json:"pass"` // over HTTP
	// Over TLS: coral-tls's req/s over file-tls's, per round and the
	// median, and whether that median meets the same acceptance.
	TLSRatios      []float64 `json:"coral_tls_over_file_tls_by_round,omitempty"`
	MedianTLSRatio float64   `json:"median_coral_tls_over_file_tls,omitempty"`
	PassTLS        *bool     `json:"pass_tls,omitempty"`
	// Over TLS: coral-tls's req/s over respond-tls's.
	TLSRespondRatios      []float64 `json:"coral_tls_over_respond_tls_by_round,omitempty"`
	MedianTLSRespondRatio float64   `json:"median_coral_tls_over_respond_tls,omitempty"`
	PassTLSRespond        *bool     `json:"pass_tls_respond,omitempty"`
	// The A/B (-baseline): coral's req/s over coral-old's, new build over
	// old, per round and the median.
	BaselineRatios      []float64 `json:"new_over_old_by_round,omitempty"`
	MedianBaselineRatio float64   `json:"median_new_over_old,omitempty"`
	// Per round, coral-old's server CPU per request over coral's (above 1:
	// the new build spends less on a hit), and the median: on a busy
	// machine it varies less than req/s, which other processes' CPU use
	// moves more.
	BaselineCPURatios      []float64 `json:"old_over_new_cpu_per_request_by_round,omitempty"`
	MedianBaselineCPURatio float64   `json:"median_old_over_new_cpu_per_request,omitempty"`
	PassBaseline           *bool     `json:"pass_new_ge_old,omitempty"`
}

type targetSumm struct {
	RPS           []float64 `json:"requests_per_s"`
	MedianRPS     float64   `json:"median_requests_per_s"`
	MedianMiBs    float64   `json:"median_transfer_mib_per_s"`
	MedianP50     float64   `json:"median_p50_ms"`
	MedianP99     float64   `json:"median_p99_ms"`
	MedianCPUPerR float64   `json:"median_server_cpu_us_per_request"`
	WireBytes     int       `json:"response_wire_bytes"`
	HeaderBytes   int       `json:"response_header_bytes"`
}

// indexResult is the diskcache index's memory, measured in this process.
type indexResult struct {
	Objects         int         `json:"objects"`
	Dir             string      `json:"store_parent_dir"` // tmpfs when /dev/shm is there
	KeyBytes        int         `json:"key_bytes"`
	BodyBytes       int         `json:"body_bytes"`
	EmptyStoreBytes int64       `json:"empty_store_heap_bytes"`
	Steps           []indexStep `json:"steps"`
	// Heap in use per object with all of them in, and between the first
	// quarter and all (the map's growth steps make the two differ).
	PerObject float64 `json:"bytes_per_object"`
	Marginal  float64 `json:"marginal_bytes_per_object"`
	// After Close and Open: the index rebuilt from disk.
	ReopenPerObject float64 `json:"reopened_bytes_per_object"`
	// Then every object read twice: the hot set of decoded metadata.
	Hot           *hotResult `json:"hot_set,omitempty"`
	InsertSeconds float64    `json:"insert_s"`
	Seconds       float64    `json:"total_s"`
}

// hotResult is the store's hot set (decoded metadata of recently read
// objects, so that a hit reads no metadata file) after reading every
// object twice: bounded by the store's default HotMetaBytes, whatever the
// number of objects.
type hotResult struct {
	Reads     int     `json:"objects_read_twice"`
	MetaReads int64   `json:"metadata_files_read"`
	Limit     int64   `json:"limit_bytes"`
	Entries   int     `json:"entries"`
	Estimated int64   `json:"estimated_bytes"` // the store's own estimate, Stats.HotBytes
	HeapBytes int64   `json:"heap_inuse_growth_bytes"`
	PerEntry  float64 `json:"heap_bytes_per_entry"`
}

type indexStep struct {
	Objects   int     `json:"objects"`
	HeapBytes int64   `json:"heap_inuse_growth_bytes"`
	PerObject float64 `json:"bytes_per_object"`
}

// proxyResult is Caddy's memory per object cached through coral_proxy.
type proxyResult struct {
	Objects       int     `json:"objects"`
	BodyBytes     int     `json:"body_bytes"`
	Misses        int64   `json:"misses"`
	OriginFetches int64   `json:"origin_fetches"`
	Seconds       float64 `json:"fetch_s"`
	HeapBefore    int64   `json:"heap_inuse_before"`
	HeapAfter     int64   `json:"heap_inuse_after"`
	RSSBefore     int64   `json:"rss_before"`
	RSSAfter      int64   `json:"rss_after"`
	PerObject     float64 `json:"heap_bytes_per_object"`
	RSSPerObject  float64 `json:"rss_bytes_per_object"`
	HeapProfile   string  `json:"heap_profile,omitempty"` // with -profile: Caddy's heap after the fetch
	// -proxy-settle after the fetch, when the DSHT node has dropped its
	// per-key load records: what stays per cached object.
	SettledAfter       float64 `json:"settled_after_s,omitempty"`
	HeapSettled        int64   `json:"heap_inuse_settled,omitempty"`
	RSSSettled         int64   `json:"rss_settled,omitempty"`
	SettledPerObject   float64 `json:"settled_heap_bytes_per_object,omitempty"`
	SettledHeapProfile string  `json:"settled_heap_profile,omitempty"`
}

// largeResult is the large-object section (large.go).
type largeResult struct {
	Object         largeObject `json:"object"`
	FileServerPath string      `json:"file_server_file"`
	Streams        []int       `json:"streams"`
	Rounds         int         `json:"rounds"`
	Duration       string      `json:"run_duration"`
	// Responses: one request per target before and after the runs, the
	// body hashed as it streamed (body_sha256).
	Responses []*sample    `json:"responses"`
	Runs      []*largeRun  `json:"runs"`
	Summary   []*largeSumm `json:"by_streams"`
	// Caddy's resident memory before the section (the object not yet
	// fetched), after it, and its peak over its life (VmHWM); and the
	// -baseline Caddy's peak.
	CaddyRSSBefore  int64 `json:"caddy_rss_before"`
	CaddyRSSAfter   int64 `json:"caddy_rss_after"`
	CaddyPeakRSS    int64 `json:"caddy_peak_rss"`
	BaselinePeakRSS int64 `json:"baseline_caddy_peak_rss,omitempty"`
}

// largeRun is one large-object run: Streams clients on one target.
type largeRun struct {
	Round   int    `json:"round"`
	Streams int    `json:"streams"`
	Target  string `json:"target"`
	// Before the run's step: how long it waited for the machine to be
	// quiet, and the CPUs other processes used in the last second of that
	// (the step's first run only).
	QuietWait  float64 `json:"quiet_wait_s,omitempty"`
	BusyBefore float64 `json:"other_cpus_before,omitempty"`
	RunTime    float64 `json:"run_time_s"`
	Bytes      int64   `json:"body_bytes"` // every body byte that arrived within the run
	Complete   int64   `json:"complete_responses"`
	// Partial is the objects' worth of bytes beyond the complete
	// responses: those the run's end cut off.
	Partial        float64  `json:"partial_responses"`
	MBps           float64  `json:"mb_per_s"` // 10⁶ bytes
	OriginRequests int64    `json:"origin_requests"`
	Problems       []string `json:"problems,omitempty"`
	ServerCPU      float64  `json:"server_cpu_s"`
	CPUPerGB       float64  `json:"server_cpu_s_per_gb"`
	SelfCPU        float64  `json:"this_process_cpu_s"` // the clients
	OtherCPU       float64  `json:"other_processes_cpu_s"`
}

// largeSumm is one stream count's medians over rounds and per-round ratios.
type largeSumm struct {
	Streams             int                         `json:"streams"`
	Targets             map[string]*largeTargetSumm `json:"targets"`
	CoralOverFile       []float64                   `json:"coral_over_file_by_round"`
	MedianCoralOverFile *float64                    `json:"median_coral_over_file,omitempty"`
	NginxOverFile       []float64                   `json:"nginx_over_file_by_round,omitempty"`
	MedianNginxOverFile *float64                    `json:"median_nginx_over_file,omitempty"`
	// coral's MB/s over coral-old's (-baseline): new build over old.
	NewOverOld       []float64 `json:"new_over_old_by_round,omitempty"`
	MedianNewOverOld *float64  `json:"median_new_over_old,omitempty"`
}

type largeTargetSumm struct {
	MBps           []float64 `json:"mb_per_s"`
	MedianMBps     float64   `json:"median_mb_per_s"`
	MedianCPUPerGB float64   `json:"median_server_cpu_s_per_gb"`
	cpu            []float64
}
