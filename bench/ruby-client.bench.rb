# frozen_string_literal: true

# Ruby side of bench/ruby-client.bench.ts (not run by hand): times, one call after another from one thread, each
# way of calling the service, in rounds whose order alternates so drift hits every way alike; prints one JSON line
# per way and round. Reads its world from the environment the TypeScript side sets.
require "json"
require "net/http"
require "ci_job_telemetry"

ORIGIN = ENV.fetch("BENCH_ORIGIN")
DOWN_URL = ENV.fetch("BENCH_DOWN_URL")
SECRET_FILE = ENV.fetch("BENCH_SECRET_FILE")
CALLS = Integer(ENV.fetch("BENCH_CALLS"))
ROUNDS = Integer(ENV.fetch("BENCH_ROUNDS"))
WARMUP = Integer(ENV.fetch("BENCH_WARMUP"))
DEADLINE = Float(ENV.fetch("BENCH_DEADLINE"))
REQUESTS = JSON.parse(File.read(ENV.fetch("BENCH_BODIES_FILE")))

def monotonic
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

# The baseline: what any Ruby caller pays for one JSON POST over a kept-alive Net::HTTP connection (the request
# serialized, the answer parsed), with none of the client's deadline, pool, breaker or answer checks.
class BareCall
  def initialize(path, token)
    uri = URI(ORIGIN)
    @http = Net::HTTP.new(uri.host, uri.port, nil)
    @http.keep_alive_timeout = 30
    @http.start
    @path = path
    @token = token
  end

  def call(request)
    post = Net::HTTP::Post.new(@path, "Content-Type" => "application/json", "Accept-Encoding" => "identity",
                                      CiJobTelemetry::InternalApiToken::HEADER_NAME => @token.current)
    post.body = JSON.generate(request)
    response = @http.request(post)
    raise "#{@path} answered #{response.code}" unless response.code == "200"

    JSON.parse(response.body)
  end
end

token = CiJobTelemetry::InternalApiToken.new(CiJobTelemetry::InternalApiToken.read_secret(SECRET_FILE))
outcomes = Hash.new(0)
client = CiJobTelemetry::Client.new(base_url: ORIGIN, secret_file: SECRET_FILE, deadline: DEADLINE, on_call: ->(call) { outcomes[call.outcome] += 1 })
ways = {
  "bare" => BareCall.new("/bench/bare", token).method(:call),
  "bare-decorator" => BareCall.new(CiJobTelemetry::Client::PATH, token).method(:call),
  "client" => client.method(:decorate)
}

next_request = 0
take = lambda do
  request = REQUESTS[next_request % REQUESTS.size]
  next_request += 1
  request
end

ways.each_value { |way| WARMUP.times { way.call(take.call) } }
outcomes.clear

ROUNDS.times do |round|
  order = round.even? ? ways.keys : ways.keys.reverse
  order.each do |name|
    way = ways.fetch(name)
    samples = Array.new(CALLS) do
      request = take.call
      started = monotonic
      way.call(request)
      monotonic - started
    end
    puts JSON.generate(way: name, round: round, samples_ms: samples.map { |s| (s * 1000).round(4) })
  end
end
puts JSON.generate(outcomes: outcomes)

# The breaker open: a client whose one failure (nothing listens at DOWN_URL) opened it for an hour.
open_client = CiJobTelemetry::Client.new(base_url: DOWN_URL, secret_file: SECRET_FILE, deadline: DEADLINE,
                                         breaker: { threshold: 1, cool_off: 3600 })
open_client.decorate(take.call)
raise "the breaker did not open" unless open_client.breaker_state == :open

samples = Array.new(ROUNDS * CALLS) do
  request = take.call
  started = monotonic
  open_client.decorate(request)
  monotonic - started
end
puts JSON.generate(way: "breaker-open", round: 0, samples_ms: samples.map { |s| (s * 1000).round(4) })
