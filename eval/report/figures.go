package main

import (
	"fmt"
	"regexp"
	"strings"
)

// In a strict document (docs/evaluation.md) every figure is generated:
// outside its regions the prose holds no number. What may stand there are
// names that contain digits: the paper's figures and sections, issues,
// RFCs, levels, percentiles, addresses and prefixes, protocol versions,
// status codes, the data set's name. Anything else with a digit is a
// figure typed by hand, and strayFigures reports it.

// nameWithDigits matches the names that may contain digits in prose.
var nameWithDigits = regexp.MustCompile(strings.Join([]string{
	`(?i:figures?|fig\.) ?\d+( and \d+)?`, // the paper's figures
	`§ ?\d+(\.\d+)*`,                      // its sections
	`(?i:issues?) \d+((, | and | or )\d+)*`,
	`RFC ?\d+`,
	`(?i:levels?)[ -]\d+((, | and |–| to )\d+)*`, // cluster levels
	`\bL\d\b`,
	`\bp\d+(\.\d+)?\b`,                 // percentiles: p50, p99.9
	`\b\d{1,3}(\.\d{1,3}){3}(/\d+)?\b`, // IPv4 addresses and prefixes
	`\b\d{1,3}(\.\d{1,3}){1,2}\.x\b`,   // address patterns: 127.0.101.x
	`/\d+\b`,                           // prefix lengths: /24, /48
	`\b\d+(st|nd|rd|th) percentile`,    // percentiles in words
	`\bHTTP/\d(\.\d)?`, `\bTLS \d\.\d\b`, `\bIPv[46]\b`, `\bICMPv6\b`, `\bSHA-?\d+\b`, `\bUTF-8\b`, `\bHTTP/[23]\b`,
	`\b(403|404|405|421|502|503|206|304)\b`, // HTTP status codes named in the text
	`\bwonderproxy-2020-07\b`,               // the data set's name
	`\b(NSDI|IPTPS) ?'?\d\d\b`,              // the papers
	`\blog₂`, `\bb-bit\b`, `\bk-buckets?\b`, `\b0x[0-9a-f]+\b`,
}, "|"))

// strayFigures lists the lines of doc that hold a digit outside its
// regions, code blocks, code spans, HTML comments and link targets, and
// outside the names above.
func strayFigures(doc string) ([]string, error) {
	return proseLines(doc, func(prose string) bool {
		return strings.ContainsAny(nameWithDigits.ReplaceAllString(prose, ""), "0123456789")
	})
}

// In the other documents (the READMEs, the design, operations) the prose
// holds the code's own numbers (defaults, limits, thresholds), so not
// every digit is a measurement. What is one without doubt: a time per operation, a
// throughput (of requests, or of megabytes: a threshold of a few KB/s is
// the code's), and the log of a run (a clock time of day, a load
// average). measuredFigure matches those; outside the regions they are
// typed from some run.
var measuredFigure = regexp.MustCompile(strings.Join([]string{
	`\d(\.\d+)? ?(µs|ns)\b`,                                      // a time per operation
	`\d ?(req/s|q/s|qps|[MG]i?B/s)\b`,                            // a throughput
	`\d (requests|queries|responses) (per second|a second|/s)\b`, // the same in words
	`\b\d{1,2}:\d{2} UTC\b`,                                      // a run's log
	`\b(?i:load average)( was| of)? \d`,                          // a run's machine
}, "|"))

// measuredFigures lists the lines of doc that hold a measured figure
// outside its regions, code blocks, code spans, HTML comments and link
// targets.
func measuredFigures(doc string) ([]string, error) {
	return proseLines(doc, measuredFigure.MatchString)
}

// proseLines lists the lines of doc whose prose (outside its regions,
// code blocks, code spans, HTML comments and link targets) bad matches.
func proseLines(doc string, bad func(prose string) bool) ([]string, error) {
	// The regions' text goes, their lines stay (blank), so that line
	// numbers are the document's.
	text, err := fill(doc, func(r region) (string, error) {
		return strings.Repeat("\n", strings.Count(doc[r.Start:r.End], "\n")), nil
	})
	if err != nil {
		return nil, err
	}
	var out []string
	fence := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") || strings.HasPrefix(strings.TrimSpace(line), "~~~") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		if bad(stripNonProse(line)) {
			out = append(out, fmt.Sprintf("line %d: %s", i+1, strings.TrimSpace(line)))
		}
	}
	return out, nil
}

var (
	codeSpan   = regexp.MustCompile("`[^`]*`")
	comment    = regexp.MustCompile(`<!--.*?-->`)
	linkTarget = regexp.MustCompile(`\]\([^)]*\)`)
)

// stripNonProse removes a line's code spans, HTML comments (region
// markers) and link targets.
func stripNonProse(line string) string {
	line = comment.ReplaceAllString(line, "")
	line = codeSpan.ReplaceAllString(line, "")
	return linkTarget.ReplaceAllString(line, "]")
}
