'use strict'
// opensearch-js (@opensearch-project/opensearch), unmodified, as an application uses it,
// pointed at one endpoint.
//
// Usage: node opensearch_js_client.js URL INDEX
//
// First the ordinary start-up calls: info(), an index template for INDEX (3 shards, 1
// replica, `id` keyword, `n` long) and the index. Then client.helpers.bulk writes documents
// {"id": "doc-NNNNNN", "n": N, "msg": ...} with `_id` "doc-NNNNNN" and the `create` action
// at about COMPAT_RATE (default 100) per second until a line "stop" arrives on stdin (or
// 20,000 documents, or 300 s). The helper's defaults stay, but for a 1 s flush interval:
// its 30 s default would send one bulk in the whole outage. It reports failures only
// (onDrop), so every document it did not drop was written. Then "written", a wait for a
// line "search", a refresh, a search and a count, and a JSON summary as the last line.
// The line protocol (progress N, acked ID, written, the summary) is in compat/README.md.

const readline = require('readline')
const { Client } = require('@opensearch-project/opensearch')
const { version } = require('@opensearch-project/opensearch/package.json')

const MAX_DOCS = 20000
const MAX_SECONDS = 300

const emit = (line) => process.stdout.write(line + '\n')
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

function describe (e) {
  const status = e && e.meta && e.meta.statusCode
  const body = e && e.meta && e.meta.body
  let text = `${e && e.name}: ${e && e.message}`
  if (status !== undefined) text += ` (status ${status}, body ${JSON.stringify(body)})`
  return 'error: ' + text.slice(0, 800)
}

async function attempt (fn) {
  try {
    return await fn()
  } catch (e) {
    return describe(e)
  }
}

async function main () {
  const [url, index] = process.argv.slice(2)
  const rate = Number(process.env.COMPAT_RATE) > 0 ? Number(process.env.COMPAT_RATE) : 100
  let stop = false
  let onSearch
  const search = new Promise((resolve) => { onSearch = resolve })
  const rl = readline.createInterface({ input: process.stdin })
  rl.on('line', (line) => {
    const word = line.trim()
    if (word === 'stop') stop = true
    if (word === 'search') onSearch()
  })
  // stdin closed: the test is gone.
  rl.on('close', () => { stop = true; onSearch() })

  const client = new Client({ node: url })
  const summary = { client: 'opensearch-js ' + version, mode: 'helpers.bulk' }
  summary.info = await attempt(async () => (await client.info()).body.version.number)
  summary.template = await attempt(async () => (await client.indices.putIndexTemplate({
    name: index + '-template',
    body: {
      index_patterns: [index],
      template: {
        settings: { number_of_shards: 3, number_of_replicas: 1 },
        mappings: { properties: { id: { type: 'keyword' }, n: { type: 'long' } } }
      }
    }
  })).body.acknowledged)
  summary.create_index = await attempt(async () =>
    (await client.indices.create({ index })).body.acknowledged)

  const handed = []
  async function * documents () {
    const start = Date.now()
    let n = 0
    while (!stop && n < MAX_DOCS && Date.now() - start < MAX_SECONDS * 1000) {
      const id = 'doc-' + String(n).padStart(6, '0')
      handed.push(id)
      yield { id, n, msg: 'small document ' + n }
      n++
      if (n % 50 === 0) emit('progress ' + n)
      // Paced by the clock, so slow answers do not lower the total.
      const ahead = start + (n * 1000) / rate - Date.now()
      if (ahead > 0) await sleep(ahead)
    }
    emit('progress ' + n)
  }

  const dropped = new Set()
  const errors = []
  let threw = false
  try {
    const result = await client.helpers.bulk({
      datasource: documents(),
      onDocument: (doc) => ({ create: { _index: index, _id: doc.id } }),
      onDrop: (d) => {
        dropped.add(d.document.id)
        errors.push(JSON.stringify({ status: d.status, error: d.error }).slice(0, 500))
      },
      flushInterval: 1000
    })
    summary.result = result
  } catch (e) {
    threw = true
    errors.push(describe(e))
  }
  // An exception leaves every answer unknown: nothing is claimed as written.
  if (!threw) {
    for (const id of handed) if (!dropped.has(id)) emit('acked ' + id)
  }
  summary.error_count = errors.length
  summary.errors = errors.slice(0, 5)

  emit('written')
  await search
  summary.refresh = await attempt(async () => {
    await client.indices.refresh({ index })
    return true
  })
  summary.search_total = await attempt(async () => (await client.search({
    index,
    body: { size: 0, track_total_hits: true, query: { match_all: {} } }
  })).body.hits.total.value)
  summary.count = await attempt(async () => (await client.count({ index })).body.count)
  emit(JSON.stringify(summary))
  process.exit(0)
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack) + '\n')
  process.exit(1)
})
