// Loaded with `node --import` before the cache-tests suite's client
// (test-engine/cli.mjs, run in the suite's directory), which sends
// everything to one base URL: its control requests (PUT /config/UUID
// before a test, GET /state/UUID after it) as well as the test requests
// (/test/UUID). The control requests are the suite's bookkeeping, not
// traffic a cache should see, so they go straight to the origin
// (CONFORMANCE_ORIGIN, "http://ADDR:PORT") for every implementation. Test
// requests go to the cache; when CONFORMANCE_HOST is set they carry it as
// Host (coral_proxy serves Coralized names only). fetch() ignores a Host
// field, so it is set below fetch, by an interceptor on the dispatcher:
// on Node.js's own (the one fetch uses anyway; another undici's would
// change how fetch sees responses, e.g. join repeated fields with "," instead
// of ", "), or on the one the suite chose for a test.
const origin = process.env.CONFORMANCE_ORIGIN
if (!origin) throw new Error('CONFORMANCE_ORIGIN is not set')
const host = process.env.CONFORMANCE_HOST || ''

function withHost (headers) {
  if (headers == null) return { host }
  if (Array.isArray(headers)) {
    const flat = headers.length > 0 && Array.isArray(headers[0]) ? headers.flat() : [...headers]
    return [...flat, 'host', host]
  }
  if (typeof headers[Symbol.iterator] === 'function') return [...[...headers].flat(), 'host', host]
  return { ...headers, host }
}

const setHost = dispatch => (opts, handler) => dispatch({ ...opts, headers: withHost(opts.headers) }, handler)

const cacheFetch = globalThis.fetch

// Node.js makes its global dispatcher on the first fetch: make one (to the
// origin, a request for no test's state), then take it.
let hostDispatcher
if (host !== '') {
  await cacheFetch(origin + '/state/conformance-harness').then(r => r.arrayBuffer())
  const nodeDispatcher = globalThis[Symbol.for('undici.globalDispatcher.1')]
  if (typeof nodeDispatcher?.compose !== 'function') {
    throw new Error(`this Node.js (${process.version}) has no composable global dispatcher; CONFORMANCE_HOST needs one`)
  }
  hostDispatcher = nodeDispatcher.compose(setHost)
}
globalThis.fetch = function (input, init) {
  const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url)
  if (url.pathname.startsWith('/config/') || url.pathname.startsWith('/state/')) {
    return cacheFetch(origin + url.pathname + url.search, init)
  }
  if (host !== '' && url.pathname.startsWith('/test/')) {
    init = { ...init, dispatcher: init?.dispatcher ? init.dispatcher.compose(setHost) : hostDispatcher }
  }
  return cacheFetch(input, init)
}
