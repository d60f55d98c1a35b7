// Command report writes every figure of Coral's documents from the result
// files committed in docs/eval, and its test fails when a document says
// anything else.
//
// # Regions
//
// A document's figures stand in generated regions; the prose around them
// is written by hand. A region is an HTML comment naming a renderer and
// its arguments, the generated text, and a closing comment:
//
//	<!-- report:hotspot.seeds -->
//	| topology | seed | … |            a block: whole lines
//	<!-- /report -->
//
//	the busiest node took <!-- report:hotspot.busiest max -->152<!-- /report --> a minute
//	                                        inline: within one line
//
// Markdown shows neither comment. `go run ./eval/report` rewrites every
// region of the documents listed in main.go (docs/evaluation.md,
// README.md, docs/design.md, docs/operations.md and the component
// READMEs) from the files; `go run ./eval/report -check`, and the test
// TestDocsMatchResults in `go test ./eval/...`, fail when a region
// differs from what the files give, so a figure edited by hand fails. docs/evaluation.md is strict:
// outside its regions, code and links its prose holds no digit but in
// names (Fig. 8, issue 21, RFC 9111, level 2, p99, /24, 404: figures.go
// lists them), so a figure typed into a sentence fails too. The other
// documents hold the code's own numbers (defaults, limits) in their prose,
// so the check there is narrower: no time per operation (µs, ns), no
// throughput (req/s, q/s, MB/s) and no run's log (a time of day in UTC, a
// load average) outside a region (measuredFigures).
//
// Every region names what it shows: `provenance FILE` (the commit, the
// tree's state, date, load and topology of the run that wrote FILE) and
// `command FILE` (the command that writes it) stand beside each section's
// figures, and `results` indexes every file.
//
// # Adding a section for a new experiment
//
//  1. Make the experiment record its provenance: put an
//     *evalrun.Provenance under the JSON key "provenance", from
//     evalrun.StartProvenance(prog, topology) when the run starts, with
//     Finish() just before the file is written. Give it a -name flag if it
//     writes more than one committed file.
//  2. Add its result file and the command that writes it to experiments
//     in experiments.go (File, Program, Args; Data if it needs the
//     WonderProxy matrix, Virtual for a simulation, Needs otherwise).
//     TestExperimentFlags checks that the flags exist.
//  3. Run the command (from a clean tree: `go run ./eval/report
//     -regenerate -only FILE`) and commit the file.
//  4. Write the renderers: a Go file here whose init registers, with
//     register("NAME.what", func(c *results, args []string) (string,
//     error)), the tables (table(head, rows)) and single figures the
//     section needs, reading the file with c.load(FILE, &v) into a struct
//     of the fields used. Format with num, count, pct, times, secs, ms and
//     dur, so that every figure reads the same way everywhere.
//  5. Write the section in docs/evaluation.md: prose without figures, a
//     `command FILE` and a `provenance FILE` region, and the regions of
//     step 4. Run `go run ./eval/report` to fill them and `go test
//     ./eval/report` to check.
//
// Two kinds of file stand apart from that recipe. eval/wan writes a
// provenance block of its own (clean_tree, command_line,
// machine_busy_cores, a note), which fileInfo reads beside
// evalrun.Provenance's fields. docs/eval/resolver-proofs.json and
// docs/eval/restart.json are written by lab tests (test/resolverlab's
// TestProofPerResolver, test/nodelab's TestRestartAnswersAtOnce) when an
// environment variable names the file: their registry entries give the
// test (Test) and the variable (Env), the documents show the go test
// command (evalrun.TestCommandLine) and a regeneration runs it, and the
// tests record the same provenance through eval/labresult (eval/internal
// is out of test/'s reach). An experiment that writes more than one file
// lists the others in Also (eval/conformance: one file per
// implementation beside summary.json, each with the run's provenance);
// TestEveryResultFileListed fails when a JSON file under docs/eval has no
// entry.
//
// # Regenerating every file
//
// `make eval` (`go run ./eval/report -regenerate`, after building the
// binaries) runs every experiment of the registry from a clean tree, one
// after the other, each writing its files with their provenance, then
// rewrites the documents once every file of the registry is this
// commit's from a clean tree (before that, rewriting them would leave the
// tree changed, and the next sitting's runs unclean: a partial run says
// so and leaves them; `go run ./eval/report` rewrites them any time). -kind virtual runs the simulations only, -kind
// real the experiments with real processes, -only some files or packages
// (eval/hotspot, test/nodelab). The regeneration refuses a tree with
// changes outside docs/eval, checks that each file it ran was written by
// this run of this commit, and at the end that every selected file is
// this commit's from a clean tree. -resume skips the experiments whose
// files are already this commit's from a clean tree, so a regeneration
// split over sittings (-kind virtual one day, -kind real the next, or a
// run stopped half-way) goes on where it stopped; -keep-going goes on
// past a failed experiment; -n prints what would run, checks the
// environment the commands need, and runs nothing.
package main
