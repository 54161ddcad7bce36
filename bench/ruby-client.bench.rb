# frozen_string_literal: true

# Ruby side of bench/ruby-client.bench.ts (not run by hand): each way of calling the service, from THREADS Ruby
# threads paced together at RATE calls a second (a thread's calls are due at fixed times, as pickups from GitLab's
# Puma and Sidekiq threads arrive whether or not the last one has been answered), in rounds whose order alternates
# so drift hits every way alike; prints one JSON line per way and round with each call's time. Every call is a new
# job, in pipelines of the sizes the TypeScript side names. Reads its world from the environment that side sets.
require "etc"
require "json"
require "net/http"
require "ci_job_telemetry"

ORIGIN = ENV.fetch("BENCH_ORIGIN")
DOWN_URL = ENV.fetch("BENCH_DOWN_URL")
SECRET_FILE = ENV.fetch("BENCH_SECRET_FILE")
ROUNDS = Integer(ENV.fetch("BENCH_ROUNDS"))
SECONDS = Float(ENV.fetch("BENCH_SECONDS"))
WARMUP_SECONDS = Float(ENV.fetch("BENCH_WARMUP_SECONDS"))
THREADS = Integer(ENV.fetch("BENCH_THREADS"))
RATE = Float(ENV.fetch("BENCH_RATE"))
DEADLINE = Float(ENV.fetch("BENCH_DEADLINE"))
BREAKER_CALLS = Integer(ENV.fetch("BENCH_BREAKER_CALLS"))
TEMPLATES = JSON.parse(File.read(ENV.fetch("BENCH_BODIES_FILE")))
PIPELINE_SIZES = ENV.fetch("BENCH_PIPELINE_SIZES").split(",").map { |size| Integer(size) }
SERVER_PID = Integer(ENV.fetch("BENCH_SERVER_PID"))
CYCLE_JOBS = PIPELINE_SIZES.sum
CYCLE_ENDS = PIPELINE_SIZES.each_with_index.map { |_, i| PIPELINE_SIZES.take(i + 1).sum }

def monotonic
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

# The server's CPU so far, in clock ticks (utime and stime, fields 14 and 15 of /proc/<pid>/stat).
def server_ticks
  stat = File.read("/proc/#{SERVER_PID}/stat")
  stat[(stat.rindex(")") + 2)..].split(" ").values_at(11, 12).sum { |ticks| Integer(ticks) }
end

# The rule is the TypeScript side's (bench/lib/bench-server.ts, quiet): its share of a core and longest wait. The
# window is longer than its 250 ms: /proc counts CPU in clock ticks (10 ms), and 5 % of 250 ms is about one tick.
QUIET_WINDOW = 0.5
QUIET_TICKS = Float(ENV.fetch("BENCH_QUIET_CPU_SHARE")) * QUIET_WINDOW * Etc.sysconf(Etc::SC_CLK_TCK)
QUIET_MAX_SECONDS = Float(ENV.fetch("BENCH_QUIET_MAX_SECONDS"))

# Waits until the server has finished what the calls before left it to do (their spans' delivery, their garbage):
# every way calls one server, so without it one way's leftover work lands in the next way's calls.
def quiet
  deadline = monotonic + QUIET_MAX_SECONDS
  before = server_ticks
  while monotonic < deadline
    sleep(QUIET_WINDOW)
    now = server_ticks
    return if now - before < QUIET_TICKS
    before = now
  end
  warn "note: the server was still busy after #{QUIET_MAX_SECONDS} s"
end

# As bench/lib/job-payload-body.ts's pipelineIdOf: consecutive job ids fill one pipeline after another.
def pipeline_of(job_id)
  cycle, within = job_id.divmod(CYCLE_JOBS)
  (cycle * PIPELINE_SIZES.size) + CYCLE_ENDS.index { |last| within < last }
end

# A request for a job never decorated before: the template's job and payload with the job's ids (shallow copies,
# made before the call is timed).
def request_for(job_id)
  template = TEMPLATES[job_id % TEMPLATES.size]
  pipeline = pipeline_of(job_id)
  template.merge("job" => template["job"].merge("id" => job_id, "pipeline_id" => pipeline, "root_pipeline_id" => pipeline),
                 "payload" => template["payload"].merge("id" => job_id))
end

# The baseline: what any Ruby caller pays for one JSON POST over a kept-alive Net::HTTP connection (the request
# serialized, the answer parsed), with none of the client's deadline, pool, breaker or answer checks. One per
# thread: a Net::HTTP connection is not shared.
class BareCall
  # `changes`: send what `decorate` sends (the runner and the job, with the client's own headers asking for the
  # changes), not the whole request.
  def initialize(path, token, changes: false)
    uri = URI(ORIGIN)
    @http = Net::HTTP.new(uri.host, uri.port, nil)
    @http.keep_alive_timeout = 30
    @http.start
    @path = path
    @token = token
    @changes = changes
  end

  def call(request)
    headers = @changes ? CiJobTelemetry::Client::CHANGES_HEADERS : { "Content-Type" => "application/json", "Accept-Encoding" => "identity" }
    post = Net::HTTP::Post.new(@path, headers.merge(CiJobTelemetry::InternalApiToken::HEADER_NAME => @token.current))
    post.body = JSON.generate(@changes ? { "runner" => request["runner"], "job" => request["job"] } : request)
    response = @http.request(post)
    raise "#{@path} answered #{response.code}" unless response.code == "200"

    JSON.parse(response.body)
  end
end

token = CiJobTelemetry::InternalApiToken.new(CiJobTelemetry::InternalApiToken.read_secret(SECRET_FILE))
outcomes = Hash.new(0)
outcomes_lock = Mutex.new
on_call = ->(call) { outcomes_lock.synchronize { outcomes[call.outcome] += 1 } }
# A pool as large as the threads that call at once, as GitLab would size it (Puma's max threads).
client = CiJobTelemetry::Client.new(base_url: ORIGIN, secret_file: SECRET_FILE, deadline: DEADLINE, on_call: on_call, pool_size: THREADS)
ways = {
  "bare" => ->(_thread) { BareCall.new(ENV.fetch("BENCH_BARE_PATH"), token).method(:call) },
  "bare-decorator" => ->(_thread) { BareCall.new(CiJobTelemetry::Client::PATH, token).method(:call) },
  "grant-write" => ->(_thread) { BareCall.new(ENV.fetch("BENCH_GRANT_WRITE_PATH"), token, changes: true).method(:call) },
  "floor" => ->(_thread) { BareCall.new(ENV.fetch("BENCH_FLOOR_PATH"), token, changes: true).method(:call) },
  "client" => ->(_thread) { client.method(:decorate) }
}
callers = ways.to_h { |name, make| [name, Array.new(THREADS) { |thread| make.call(thread) }] }

next_job = 3_000_000
# THREADS threads for `seconds`, call i of thread t due at start + (i * THREADS + t) / RATE: [call seconds, late
# seconds] per call, late being how long after its due time the call could start (Ruby's own lag).
run = lambda do |name, seconds|
  quiet
  calls_per_thread = (seconds * RATE / THREADS).round
  first_job = next_job
  next_job += calls_per_thread * THREADS
  start = monotonic + 0.05
  cpu_before = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
  calls = THREADS.times.map do |thread|
    Thread.new do
      way = callers.fetch(name).fetch(thread)
      Array.new(calls_per_thread) do |i|
        request = request_for(first_job + (i * THREADS) + thread)
        due = start + (((i * THREADS) + thread) / RATE)
        wait = due - monotonic
        sleep(wait) if wait.positive?
        # A call the open breaker will skip answers in a microsecond, undecorated: counted apart, not timed.
        skipped = name == "client" && client.breaker_state == :open
        started = monotonic
        way.call(request)
        [monotonic - started, started - due, skipped]
      end
    end
  end.flat_map(&:value)
  # Ruby's own CPU per call (this process: the calls, the pacing, the threads' switching), as each way costs GitLab.
  [calls, (Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu_before) / calls.size]
end

ways.each_key { |name| run.call(name, WARMUP_SECONDS) }
outcomes_lock.synchronize { outcomes.clear }

ROUNDS.times do |round|
  order = round.even? ? ways.keys : ways.keys.reverse
  order.each do |name|
    calls, cpu_per_call = run.call(name, SECONDS)
    timed = calls.reject { |_, _, skipped| skipped }
    puts JSON.generate(way: name, round: round, samples_ms: timed.map { |call, _| (call * 1000).round(4) },
                       late_ms: timed.map { |_, late| (late * 1000).round(3) }, skipped: calls.size - timed.size,
                       cpu_us_per_call: (cpu_per_call * 1e6).round(1))
    $stdout.flush
  end
end
puts JSON.generate(outcomes: outcomes)

# The breaker open: a client whose one failure (nothing listens at DOWN_URL) opened it for an hour; one thread.
open_client = CiJobTelemetry::Client.new(base_url: DOWN_URL, secret_file: SECRET_FILE, deadline: DEADLINE,
                                         breaker: { threshold: 1, cool_off: 3600 })
open_client.decorate(request_for(next_job))
raise "the breaker did not open" unless open_client.breaker_state == :open

samples = Array.new(BREAKER_CALLS) do |i|
  request = request_for(next_job + i)
  started = monotonic
  open_client.decorate(request)
  monotonic - started
end
puts JSON.generate(way: "breaker-open", round: 0, samples_ms: samples.map { |s| (s * 1000).round(4) }, late_ms: [])
