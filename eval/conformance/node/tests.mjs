// Prints the cache-tests suite's test list as JSON, one object per test
// with what scoring needs: id, suite, kind ("" for required), depends_on,
// browser_only (the command-line client skips those). Usage:
//   node tests.mjs CACHE_TESTS_DIR
import path from 'node:path'
import { pathToFileURL } from 'node:url'

const dir = process.argv[2]
if (!dir) throw new Error('usage: node tests.mjs CACHE_TESTS_DIR')
const { default: suites } = await import(pathToFileURL(path.join(dir, 'tests', 'index.mjs')).href)
const out = []
for (const suite of suites) {
  for (const test of suite.tests) {
    out.push({
      id: test.id,
      suite: suite.id,
      name: test.name || '',
      kind: test.kind || '',
      depends_on: test.depends_on || [],
      browser_only: test.browser_only === true
    })
  }
}
process.stdout.write(JSON.stringify(out, null, 1) + '\n')
