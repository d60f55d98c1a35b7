package main

import (
	"fmt"
	"regexp"
	"strings"
)

// A region is a generated part of a document, between an opening marker
// naming its renderer (and its arguments) and a closing one:
//
//	<!-- report:NAME ARG... -->          a block: the markers on lines of
//	…generated lines…                    their own, the generated text
//	<!-- /report -->                     between them
//
//	… took <!-- report:NAME ARG... -->81<!-- /report --> a minute …
//	                                      inline: within one line
//
// Markdown renders neither marker, so a reader sees the figures alone.

const (
	openPrefix = "<!-- report:"
	openSuffix = " -->"
	closeMark  = "<!-- /report -->"
)

// region is one generated part of a document.
type region struct {
	Name  string   // the renderer
	Args  []string // its arguments
	Block bool     // markers on lines of their own
	Line  int      // 1-based line of the opening marker
	// Start and End delimit the generated text in the document: after
	// the opening marker (and its newline, for a block) and before the
	// closing marker (and, for a block, the start of its line).
	Start, End int
}

// Key names the region in messages: its renderer and arguments.
func (r region) Key() string { return strings.TrimSpace(r.Name + " " + strings.Join(r.Args, " ")) }

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9.-]*$`)

// parseRegions finds every region of doc. Markers must pair up, regions
// must not nest, a block's markers stand on lines of their own and an
// inline region stays within its line.
func parseRegions(doc string) ([]region, error) {
	var out []region
	pos := 0
	for {
		i := strings.Index(doc[pos:], openPrefix)
		j := strings.Index(doc[pos:], closeMark)
		if i < 0 {
			if j >= 0 {
				return nil, fmt.Errorf("line %d: %s without an opening marker", lineOf(doc, pos+j), closeMark)
			}
			return out, nil
		}
		if j >= 0 && j < i {
			return nil, fmt.Errorf("line %d: %s without an opening marker", lineOf(doc, pos+j), closeMark)
		}
		open := pos + i
		endOpen := strings.Index(doc[open:], openSuffix)
		if endOpen < 0 || strings.Contains(doc[open:open+endOpen], "\n") {
			return nil, fmt.Errorf("line %d: opening marker not closed by %q on its line", lineOf(doc, open), openSuffix)
		}
		fields := strings.Fields(doc[open+len(openPrefix) : open+endOpen])
		if len(fields) == 0 || !nameRE.MatchString(fields[0]) {
			return nil, fmt.Errorf("line %d: bad region name in %q", lineOf(doc, open), doc[open:open+endOpen+len(openSuffix)])
		}
		r := region{Name: fields[0], Args: fields[1:], Line: lineOf(doc, open), Start: open + endOpen + len(openSuffix)}
		lineStart := strings.LastIndexByte(doc[:open], '\n') + 1
		r.Block = strings.TrimSpace(doc[lineStart:open]) == "" && strings.HasPrefix(doc[r.Start:], "\n")
		if r.Block {
			r.Start++ // past the newline
		}
		c := strings.Index(doc[r.Start:], closeMark)
		if c < 0 {
			return nil, fmt.Errorf("line %d: region %s has no %s", r.Line, r.Key(), closeMark)
		}
		closeAt := r.Start + c
		if k := strings.Index(doc[r.Start:closeAt], openPrefix); k >= 0 {
			return nil, fmt.Errorf("line %d: region %s opens inside region %s", lineOf(doc, r.Start+k), doc[r.Start+k:min(len(doc), r.Start+k+40)], r.Key())
		}
		if r.Block {
			cl := strings.LastIndexByte(doc[:closeAt], '\n') + 1
			if cl < r.Start || strings.TrimSpace(doc[cl:closeAt]) != "" {
				return nil, fmt.Errorf("line %d: block region %s must end with %s on a line of its own", lineOf(doc, closeAt), r.Key(), closeMark)
			}
			r.End = cl
		} else {
			if strings.Contains(doc[r.Start:closeAt], "\n") {
				return nil, fmt.Errorf("line %d: inline region %s runs past its line", r.Line, r.Key())
			}
			r.End = closeAt
		}
		out = append(out, r)
		pos = closeAt + len(closeMark)
	}
}

func lineOf(doc string, at int) int { return strings.Count(doc[:at], "\n") + 1 }

// fill replaces every region's text with what render returns for it: a
// block's text is whole lines (a final newline is added when missing), an
// inline region's one line.
func fill(doc string, render func(region) (string, error)) (string, error) {
	rs, err := parseRegions(doc)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	last := 0
	for _, r := range rs {
		text, err := render(r)
		if err != nil {
			return "", fmt.Errorf("line %d: %s: %w", r.Line, r.Key(), err)
		}
		if r.Block {
			if text != "" && !strings.HasSuffix(text, "\n") {
				text += "\n"
			}
		} else if strings.Contains(text, "\n") {
			return "", fmt.Errorf("line %d: %s: inline text holds a line break", r.Line, r.Key())
		}
		b.WriteString(doc[last:r.Start])
		b.WriteString(text)
		last = r.End
	}
	b.WriteString(doc[last:])
	return b.String(), nil
}
