# frozen_string_literal: true

require "test_helper"
require "net/http"

# The reads across pipelines (SPEC §13) against the real service, loaded by test/e2e/ruby-client.e2e-spec.ts with
# the endpoints' own world (acrossWorld in test/suites/across-endpoints.suite.ts): project 71's 30 pipelines on main,
# 71000 to 71029, one an hour, whose `test` job restores its cache 60 s longer from 71015 on (71003's test failed
# once and was retried); project 72's 72000 to 72029, whose `test` got 600 s slower. Then the breaker and the
# deadline on them, a POST among them.
class AcrossTest < Minitest::Test
  include ClientTestSupport

  PROJECT = 71
  OTHER_PROJECT = 72
  SLOWER = 71_020
  FIRST_SLOWER = 71_015

  def reader(base_url = world("CJT_SERVICE_URL"), **options)
    client_for(base_url, read_deadline: 10.0, **options)
  end

  def window
    { from: Time.iso8601(world("CJT_ACROSS_FROM")), to: Time.iso8601(world("CJT_ACROSS_TO")) }
  end

  def millis(seconds)
    (seconds * 1000).round
  end

  def test_compare_pipeline_puts_the_minute_on_tests_restore_cache_and_the_parts_add_up
    client, calls = reader
    read = client.compare_pipeline(project_id: PROJECT, pipeline_id: SLOWER)
    assert read.ok?, read.to_h.inspect
    baseline = read.data["baseline"]
    assert_operator baseline["pipeline_id"], :<, FIRST_SLOWER, baseline.inspect
    assert_equal 20, baseline["among"]
    assert_match(/median/, baseline["description"])
    assert_equal 60, read.data["contributions"]["restore_cache"]
    assert_equal millis(read.data["duration_delta_seconds"]), read.data["contributions"].values.sum { |seconds| millis(seconds) }
    test = read.data["jobs"].find { |job| job["name"] == "test" }
    assert_equal({ "target" => true, "baseline" => true }, test["on_critical_path"])
    assert_equal [:compare_pipeline, :read, 200], calls.pop.to_h.values_at(:operation, :outcome, :status)

    named = client.compare_pipeline(project_id: PROJECT, pipeline_id: SLOWER, baseline: "71002", **window)
    assert named.ok?, named.to_h.inspect
    assert_equal [71_002, 60], [named.data.dig("baseline", "pipeline_id"), named.data.dig("contributions", "restore_cache")]
  end

  def test_another_projects_pipeline_or_baseline_is_not_found
    client, = reader
    [client.compare_pipeline(project_id: PROJECT, pipeline_id: 72_020),
     client.compare_pipeline(project_id: PROJECT, pipeline_id: SLOWER, baseline: 72_002)].each do |read|
      assert_equal [nil, :not_found, 404], [read.data, read.outcome, read.status]
    end
  end

  # Nothing before the first pipeline: the service says so instead of comparing it with itself, and saying so is an
  # answer, not a failure of the service: a breaker that opens at the first failure stays closed.
  def test_nothing_to_compare_with_is_unanswerable_and_not_a_failure
    client, calls = reader(read_breaker: { threshold: 1, cool_off: 60 })
    2.times do
      read = client.compare_pipeline(project_id: PROJECT, pipeline_id: 71_000)
      assert_equal [nil, :unanswerable, 422], [read.data, read.outcome, read.status]
      assert_match(/name one as baseline/, read.error)
    end
    assert_equal [:unanswerable, :closed], calls.pop.to_h.values_at(:outcome, :breaker)
    assert_equal :closed, client.read_breaker.state
  end

  def test_regressions_find_the_step_at_the_pipeline_and_commit_it_began
    client, = reader
    read = client.regressions(project_id: PROJECT, ref: "main", **window)
    assert read.ok?, read.to_h.inspect
    step = read.data["change_points"].find { |point| point["job"] == "test" && point["part"] == "restore_cache" }
    refute_nil step, read.data["change_points"].inspect
    assert_equal [10, 70], step.values_at("before_seconds", "after_seconds")
    assert_operator (step["first_pipeline_id"] - FIRST_SLOWER).abs, :<=, 1
    assert_equal step["first_pipeline_id"] - (PROJECT * 1000), step["first_sha"][8..].to_i(16)
    assert_equal 30, read.data["pipelines"]
    none = client.regressions(project_id: PROJECT, ref: "no-such-branch", **window)
    assert_equal [true, [], 0], [none.ok?, none.data["change_points"], none.data["pipelines"]]
  end

  def test_waste_counts_the_retried_attempt
    client, = reader
    read = client.waste(project_id: PROJECT, **window)
    assert read.ok?, read.to_h.inspect
    test = read.data["jobs"].find { |job| job["name"] == "test" }
    assert_equal 41, test.dig("retry_seconds", "total")
    assert_equal 1, test.dig("flaky", "commits")
    assert_nil test["cost"]
  end

  def test_runner_queue_and_what_two_more_runners_would_change
    client, calls = reader
    queue = client.runner_queue(project_id: PROJECT, **window)
    assert queue.ok?, queue.to_h.inspect
    assert_equal %w[deploy docker,linux], queue.data["tag_sets"].map { |set| set["tags"] }.sort

    what_if = client.runner_what_if(project_id: PROJECT, tags: %w[linux docker], runners: 2, **window)
    assert what_if.ok?, what_if.to_h.inspect
    assert_equal ["docker,linux", 2, 30], what_if.data.values_at("tags", "runners_added", "pipelines")
    assert_operator what_if.data.dig("queue_seconds", "after", "p95"), :<=, what_if.data.dig("queue_seconds", "before", "p95")
    calls.pop
    assert_equal [:runner_what_if, :read], calls.pop.to_h.values_at(:operation, :outcome)
  end

  def test_a_what_if_the_service_or_the_client_refuses_is_a_bad_request
    client, = reader
    refused = client.runner_what_if(project_id: PROJECT, tags: "docker", runners: 5000)
    assert_equal [:bad_request, 400], [refused.outcome, refused.status]
    assert_match(/runners must be a whole number/, refused.error)
    [{ tags: 7, runners: 1 }, { tags: "docker", runners: 1.5 }, { tags: "docker", runners: 1, from: "last week" }].each do |fields|
      read = client.runner_what_if(project_id: PROJECT, **fields)
      assert_equal [:bad_request, nil], [read.outcome, read.status], fields.inspect
    end
    assert_equal [:bad_request, nil], client.compare_pipeline(project_id: PROJECT, pipeline_id: SLOWER, baseline: -1).to_h.values_at(:outcome, :status)
  end

  # The GETs and the POST share the decorator's pool: one kept-alive connection carries them all.
  def test_reads_across_pipelines_share_one_kept_alive_connection
    client, = client_for("#{world('CJT_MISBEHAVING_URL')}/proxy", read_deadline: 10.0, pool_size: 1)
    before = Integer(Net::HTTP.get(URI("#{world('CJT_MISBEHAVING_URL')}/-/connections")))
    reads = [client.compare_pipeline(project_id: PROJECT, pipeline_id: SLOWER),
             client.runner_what_if(project_id: PROJECT, tags: "docker,linux", runners: 1, **window),
             client.waste(project_id: PROJECT, **window),
             client.runner_what_if(project_id: PROJECT, tags: "deploy", runners: 1, **window)]
    assert_equal [:read] * 4, reads.map(&:outcome), reads.map(&:error).inspect
    assert_equal "deploy", reads.last.data["tags"]
    assert_equal 1, Integer(Net::HTTP.get(URI("#{world('CJT_MISBEHAVING_URL')}/-/connections"))) - before
  end

  def misbehaving(behaviour)
    "#{world('CJT_MISBEHAVING_URL')}/#{behaviour}"
  end

  def test_a_stalled_or_unavailable_service_ends_the_read_by_its_deadline
    client, = client_for(misbehaving("stall-before-answer"), read_deadline: DEADLINE, read_breaker: { threshold: 1000 })
    { compare: -> { client.compare_pipeline(project_id: PROJECT, pipeline_id: SLOWER) },
      what_if: -> { client.runner_what_if(project_id: PROJECT, tags: "docker", runners: 1) } }.each do |name, ask|
      started = monotonic
      read = ask.call
      seconds = monotonic - started
      assert_equal [nil, :timeout], [read.data, read.outcome], name
      assert_operator seconds, :<, DEADLINE_BOUND, "a #{DEADLINE} s read deadline held #{name} #{seconds.round(3)} s"
    end

    unavailable, = client_for(misbehaving("unavailable"), read_deadline: DEADLINE, read_breaker: { threshold: 1000 })
    read = unavailable.runner_what_if(project_id: PROJECT, tags: "docker", runners: 1)
    assert_equal [:unavailable, 503, 7], [read.outcome, read.status, read.retry_after]
  end

  # A store that cannot answer opens the reads' breaker, whichever read met it; pickups are still decorated.
  def test_failed_reads_across_pipelines_open_the_reads_breaker_only
    client, calls = client_for(misbehaving("unavailable"), read_deadline: DEADLINE, read_breaker: { threshold: 2, cool_off: 60 })
    client.runner_what_if(project_id: PROJECT, tags: "docker", runners: 1)
    client.regressions(project_id: PROJECT)
    skipped = [client.compare_pipeline(project_id: PROJECT, pipeline_id: SLOWER), client.runner_what_if(project_id: PROJECT, tags: "docker", runners: 1)]
    assert_equal [[:skipped, nil]] * 2, skipped.map { |read| [read.outcome, read.status] }
    assert_equal %i[unavailable unavailable skipped skipped], Array.new(4) { calls.pop.outcome }
    assert_equal [:open, :closed], [client.read_breaker.state, client.breaker_state]
  end
end
