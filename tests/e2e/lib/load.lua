-- wrk script for the server load test: POST /translate with one short sentence; counts responses per
-- status code across all threads and prints them (with latency percentiles) when done.
wrk.method = "POST"
wrk.path = "/translate"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"q": "The house is big and the garden is beautiful.", "source": "en", "target": "de"}'

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  statuses = {}
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    local s = t:get("statuses")
    for code, n in pairs(s) do total[code] = (total[code] or 0) + n end
  end
  local codes = {}
  for code, n in pairs(total) do table.insert(codes, string.format("%d=%d", code, n)) end
  table.sort(codes)
  io.write(string.format("statuses: %s\n", table.concat(codes, " ")))
  io.write(string.format("latency_ms: p50=%.1f p90=%.1f p99=%.1f max=%.1f\n", latency:percentile(50) / 1000,
                         latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
  io.write(string.format("requests: %d in %.1f s (%.1f/s), socket errors: connect %d read %d write %d timeout %d\n",
                         summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
                         summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout))
end
