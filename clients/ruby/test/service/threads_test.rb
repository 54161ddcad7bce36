# frozen_string_literal: true

require "test_helper"
require "net/http"

# One client shared by 16 threads, as Puma's threads share it, through a counting proxy to the real service.
class ThreadsTest < Minitest::Test
  include ClientTestSupport

  THREADS = 16
  # Generous: sixteen calls at once on a loaded machine; this checks that each gets its own answer, not speed.
  DEADLINE_FOR_ANSWERS = 10.0

  def connections_opened
    Integer(Net::HTTP.get(URI("#{world('CJT_MISBEHAVING_URL')}/-/connections")))
  end

  def decorate_at_once(client, first_job_id)
    start = Thread::Queue.new
    threads = Array.new(THREADS) do |i|
      Thread.new do
        start.pop
        request = job_request(job_id: first_job_id + i, root_pipeline_id: 600 + i)
        [request, client.decorate(request)]
      end
    end
    THREADS.times { start << :go }
    threads.map(&:value)
  end

  def test_sixteen_threads_each_get_their_own_job_decorated_over_kept_alive_connections
    client, calls = client_for("#{world('CJT_MISBEHAVING_URL')}/proxy", deadline: DEADLINE_FOR_ANSWERS, pool_size: THREADS)
    before = connections_opened
    results = decorate_at_once(client, 5000) + decorate_at_once(client, 5100)

    assert_equal [:decorated] * (2 * THREADS), Array.new(2 * THREADS) { calls.pop.outcome }
    results.each do |request, payload|
      assert_equal request.dig("job", "id"), payload["id"]
      assert_equal request.dig("job", "id").to_s, payload["variables"].find { |v| v["key"] == "CI_JOB_ID" }["value"]
    end
    assert_equal 2 * THREADS, results.map { |_, payload| payload.dig("features", "tracing", "traceparent") }.uniq.size
    opened = connections_opened - before
    assert_operator opened, :<=, THREADS, "the second round reuses the first round's connections"
  end
end
