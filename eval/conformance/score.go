package main

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Test is one test of the cache-tests suite, as node/tests.mjs lists it:
// what scoring needs to know about it.
type Test struct {
	ID    string `json:"id"`
	Suite string `json:"suite"`
	Name  string `json:"name"`
	// Kind is "" (required: the suite's tests without a kind), "required",
	// "optimal" or "check".
	Kind      string   `json:"kind"`
	DependsOn []string `json:"depends_on"`
	// BrowserOnly tests are never run by the suite's command-line client.
	BrowserOnly bool `json:"browser_only"`
}

// Required reports whether the test is one every cache must pass.
func (t Test) Required() bool { return t.Kind == "" || t.Kind == "required" }

// Status is a test's result as the suite's results page shows it
// (test-engine/lib/results.mjs, determineTestResult).
type Status string

const (
	Pass           Status = "pass"            // passed, and so did every test it depends on
	Fail           Status = "fail"            // a required test failed an assertion
	OptionalFail   Status = "optional_fail"   // an optimal test failed
	Yes            Status = "yes"             // a check answered yes
	No             Status = "no"              // a check answered no
	SetupFail      Status = "setup_fail"      // an assertion the test only sets up failed
	Retry          Status = "retry"           // the cache sent the same request to the origin twice
	HarnessFail    Status = "harness_fail"    // the client gave up (timeout) or broke
	DependencyFail Status = "dependency_fail" // it ran, but a test it depends on did not pass
	Untested       Status = "untested"        // no result
)

// passed are the statuses that let dependent tests count.
func (s Status) passed() bool { return s == Pass || s == Yes }

// Result is one test's outcome for one implementation.
type Result struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"`
	Status Status `json:"status"`
	// Detail is the client's error ("Assertion: Response 2 does not come
	// from cache"), or the first dependency that did not pass.
	Detail string `json:"detail,omitempty"`
}

// Count is how many tests of a kind passed, of how many the client runs.
type Count struct {
	Passed int `json:"passed"`
	Of     int `json:"of"`
}

// Score is an implementation's results, counted the suite's way.
type Score struct {
	Required Count `json:"required"`
	Optimal  Count `json:"optimal"`
	// Checks are informational: "yes" answers of all checks.
	Checks  Count    `json:"checks"`
	Results []Result `json:"results,omitempty"`
}

// rawResult is one entry of the client's output: true, or
// [error name, message].
type rawResult struct {
	passed        bool
	name, message string
}

func (r *rawResult) UnmarshalJSON(b []byte) error {
	var ok bool
	if err := json.Unmarshal(b, &ok); err == nil {
		if !ok {
			r.name = "false"
		}
		r.passed = ok
		return nil
	}
	var pair []string
	if err := json.Unmarshal(b, &pair); err != nil || len(pair) == 0 {
		return fmt.Errorf("a result is true or [name, message], not %s", b)
	}
	r.name = pair[0]
	if len(pair) > 1 {
		r.message = pair[1]
	}
	return nil
}

// ParseResults reads the client's JSON output: test ID to result.
func ParseResults(raw []byte) (map[string]rawResult, error) {
	var m map[string]rawResult
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("the client's results: %w", err)
	}
	return m, nil
}

// ScoreResults counts results with the suite's rules: a test passes only
// if it passed and every test it depends on passed (transitively); tests
// without a kind are required, "optimal" ones optimal, "check" ones
// neither. Browser-only tests are left out, as the command-line client
// never runs them. An unknown dependency or kind, or a dependency cycle,
// is an error: the list and the rules disagree, and a count would be
// wrong.
func ScoreResults(tests []Test, results map[string]rawResult) (Score, error) {
	byID := make(map[string]Test, len(tests))
	for _, t := range tests {
		if _, dup := byID[t.ID]; dup {
			return Score{}, fmt.Errorf("test %q listed twice", t.ID)
		}
		switch t.Kind {
		case "", "required", "optimal", "check":
		default:
			return Score{}, fmt.Errorf("test %q: unknown kind %q", t.ID, t.Kind)
		}
		byID[t.ID] = t
	}
	s := scorer{byID: byID, results: results, memo: map[string]Result{}, visiting: map[string]bool{}}
	var out Score
	for _, t := range tests {
		if t.BrowserOnly {
			continue
		}
		r, err := s.status(t.ID)
		if err != nil {
			return Score{}, err
		}
		out.Results = append(out.Results, r)
		c := &out.Checks
		switch {
		case t.Required():
			c = &out.Required
		case t.Kind == "optimal":
			c = &out.Optimal
		}
		c.Of++
		if r.Status.passed() {
			c.Passed++
		}
	}
	slices.SortFunc(out.Results, func(a, b Result) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	return out, nil
}

type scorer struct {
	byID     map[string]Test
	results  map[string]rawResult
	memo     map[string]Result
	visiting map[string]bool
}

// status follows determineTestResult: no result is untested; a
// dependency that did not pass makes a dependency failure; then the
// test's own result by kind.
func (s *scorer) status(id string) (Result, error) {
	if r, ok := s.memo[id]; ok {
		return r, nil
	}
	t, ok := s.byID[id]
	if !ok {
		return Result{}, fmt.Errorf("unknown test %q", id)
	}
	if s.visiting[id] {
		return Result{}, fmt.Errorf("dependency cycle through %q", id)
	}
	s.visiting[id] = true
	defer delete(s.visiting, id)
	r := Result{ID: id, Kind: t.Kind}
	raw, ran := s.results[id]
	if !ran {
		r.Status = Untested
		s.memo[id] = r
		return r, nil
	}
	for _, dep := range t.DependsOn {
		d, err := s.status(dep)
		if err != nil {
			return Result{}, fmt.Errorf("%s depends on %w", id, err)
		}
		if !d.Status.passed() {
			r.Status, r.Detail = DependencyFail, fmt.Sprintf("%s: %s", dep, d.Status)
			s.memo[id] = r
			return r, nil
		}
	}
	if !raw.passed {
		r.Detail = raw.name
		if raw.message != "" {
			r.Detail += ": " + raw.message
		}
	}
	switch {
	case raw.name == "Setup" && raw.message == "retry":
		r.Status = Retry
	case raw.name == "Setup":
		r.Status = SetupFail
	case raw.name == "AbortError" || raw.name == "false":
		r.Status = HarnessFail
	case t.Required():
		r.Status = choose(raw.passed, Pass, Fail)
	case t.Kind == "optimal":
		r.Status = choose(raw.passed, Pass, OptionalFail)
	default:
		r.Status = choose(raw.passed, Yes, No)
	}
	s.memo[id] = r
	return r, nil
}

func choose(ok bool, yes, no Status) Status {
	if ok {
		return yes
	}
	return no
}
