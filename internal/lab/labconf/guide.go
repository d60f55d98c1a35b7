package labconf

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// MarkedBlocks returns the fenced blocks of the Markdown file at path
// whose fence follows a line `<!-- KIND: NAME -->`, by NAME: the command
// blocks a guide marks for a lab test to run as written. A marker not
// right before a fence, or a NAME marked twice, is an error.
func MarkedBlocks(path, kind string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	marker := regexp.MustCompile(`^<!-- ` + regexp.QuoteMeta(kind) + `: ([a-z-]+) -->$`)
	blocks := map[string]string{}
	name, in := "", false
	var body []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case in && line == "```":
			if _, dup := blocks[name]; dup {
				return nil, fmt.Errorf("%s: %s block %q twice", path, kind, name)
			}
			blocks[name] = strings.Join(body, "\n") + "\n"
			name, in, body = "", false, nil
		case in:
			body = append(body, line)
		case name != "" && strings.HasPrefix(line, "```"):
			in = true
		case name != "":
			return nil, fmt.Errorf("%s: %s block %q: the marker is not right before a fence", path, kind, name)
		default:
			if m := marker.FindStringSubmatch(line); m != nil {
				name = m[1]
			}
		}
	}
	return blocks, sc.Err()
}
