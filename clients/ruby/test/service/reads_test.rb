# frozen_string_literal: true

require "test_helper"

# The reads (SPEC §12) against the real service, loaded by test/e2e/ruby-client.e2e-spec.ts with the read API's
# world (test/helpers/reads-cases.ts): project 7's pipeline 500 (build, test and lint, child pipeline 501 through
# bridge 5, deploy), project 8's pipeline 800. Then each way a read can fail: it returns nothing, with its reason,
# near its deadline, and never raises.
class ReadsTest < Minitest::Test
  include ClientTestSupport

  def reader(base_url = world("CJT_SERVICE_URL"), **options)
    client_for(base_url, read_deadline: 5.0, **options)
  end

  def created_at
    Time.iso8601(world("CJT_PIPELINE_CREATED_AT"))
  end

  def spans_of(trace)
    trace["resourceSpans"].flat_map { |resource| resource["scopeSpans"].flat_map { |scope| scope["spans"] } }
  end

  def test_pipeline_trace_whole_and_complete
    client, calls = reader
    read = client.pipeline_trace(project_id: 7, pipeline_id: 500, from: created_at - 60, to: created_at + 600)
    assert read.ok?, read.to_h.inspect
    spans = spans_of(read.data["trace"])
    assert_equal({ "spans" => spans.size, "roots" => 1, "missing_parents" => 0 }, read.data["completeness"].slice("spans", "roots", "missing_parents"))
    assert_equal 5, spans.count { |span| span["name"] == "job" }
    call = calls.pop
    assert_equal [:pipeline_trace, :read, 200], [call.operation, call.outcome, call.status]
  end

  def test_job_trace_is_the_job_subtree
    client, = reader
    read = client.job_trace(project_id: 7, job_id: 1)
    assert read.ok?, read.to_h.inspect
    names = spans_of(read.data["trace"]).map { |span| span["name"] }
    assert_includes names, "queue_wait"
    assert_includes names, "job_execution"
    refute_includes names, "pipeline"
  end

  def test_critical_path
    client, = reader
    read = client.critical_path(project_id: 7, pipeline_id: 500)
    assert read.ok?, read.to_h.inspect
    assert_equal [1, 2, 51, 4], read.data["path"].map { |element| element["job_id"] }
    assert_equal "lint", read.data["slack"].first["name"]
  end

  def test_jobs_summary_on_a_ref
    client, = reader
    read = client.jobs_summary(project_id: 7, from: created_at - 3600, to: Time.now, ref: "main")
    assert read.ok?, read.to_h.inspect
    assert_equal %w[build child-build deploy lint test], read.data["jobs"].map { |job| job["name"] }.sort
    awkward = client.jobs_summary(project_id: 7, ref: "ma\"in\\\u0000 & ref=x")
    assert_equal [true, []], [awkward.ok?, awkward.data["jobs"]]
  end

  def test_another_projects_pipeline_or_job_is_not_found
    client, calls = reader
    [client.pipeline_trace(project_id: 7, pipeline_id: 800), client.job_trace(project_id: 8, job_id: 1),
     client.critical_path(project_id: 7, pipeline_id: 123_456)].each do |read|
      assert_equal [nil, :not_found, 404], [read.data, read.outcome, read.status]
    end
    assert_equal :not_found, calls.pop.outcome
    assert_equal :closed, client.read_breaker.state
  end

  def test_a_window_that_does_not_hold_the_pipeline_is_not_found
    client, = reader
    read = client.pipeline_trace(project_id: 7, pipeline_id: 500, from: created_at - 3 * 86_400, to: created_at - 2 * 86_400)
    assert_equal :not_found, read.outcome
  end

  def test_an_id_that_is_not_one_is_refused_before_asking
    client, calls = reader(world("CJT_DOWN_URL"))
    ["500/../../job_payload", -1, nil, 1.5].each do |id|
      read = client.pipeline_trace(project_id: 7, pipeline_id: id)
      assert_equal [nil, :bad_request, nil], [read.data, read.outcome, read.status]
      assert_match(/pipeline_id must be a positive integer/, read.error)
    end
    assert_equal :bad_request, client.jobs_summary(project_id: 7, from: "yesterday").outcome
    assert_equal :bad_request, calls.pop.outcome
  end

  def misbehaving(behaviour)
    "#{world('CJT_MISBEHAVING_URL')}/#{behaviour}"
  end

  # Nothing, the reason, near the deadline, never an exception.
  def fails(base_url, **options)
    client, calls = client_for(base_url, read_deadline: DEADLINE, read_breaker: { threshold: 1000 }, **options)
    started = monotonic
    read = client.pipeline_trace(project_id: 7, pipeline_id: 500)
    seconds = monotonic - started
    assert_nil read.data
    refute read.ok?
    assert_operator seconds, :<, DEADLINE_BOUND, "a #{DEADLINE} s read deadline held the read #{seconds.round(3)} s"
    [read, calls.pop]
  end

  def test_unavailable_says_when_to_ask_again
    read, call = fails(misbehaving("unavailable"))
    assert_equal [:unavailable, 503, 7, "traces cannot be read right now"], [read.outcome, read.status, read.retry_after, read.error]
    assert_equal :pipeline_trace, call.operation
  end

  def test_service_down_stalling_trickling_or_answering_garbage
    assert_equal :unreachable, fails(world("CJT_DOWN_URL")).first.outcome
    assert_equal :timeout, fails(misbehaving("stall-before-answer")).first.outcome
    assert_equal :timeout, fails(misbehaving("trickle")).first.outcome
    assert_equal :invalid_answer, fails(misbehaving("garbage")).first.outcome
    assert_equal :http_error, fails(misbehaving("500")).first.outcome
    assert_equal :unreachable, fails(misbehaving("reset")).first.outcome
  end

  def test_an_answer_larger_than_allowed_is_not_read
    read, = fails(world("CJT_SERVICE_URL"), max_read_bytes: 1024)
    assert_equal :invalid_answer, read.outcome
  end

  def test_a_wrong_secret_is_unauthorized
    read, = fails(world("CJT_SERVICE_URL"), secret_file: secret_file_with("\x01" * 32))
    assert_equal [:unauthorized, 401], [read.outcome, read.status]
  end

  # A store that cannot answer opens the reads' breaker; pickups are still decorated.
  def test_failed_reads_open_their_own_breaker_not_the_decorators
    client, calls = client_for(misbehaving("unavailable"), read_deadline: DEADLINE, read_breaker: { threshold: 2, cool_off: 60 })
    2.times { client.critical_path(project_id: 7, pipeline_id: 500) }
    skipped = client.critical_path(project_id: 7, pipeline_id: 500)
    assert_equal [:skipped, nil], [skipped.outcome, skipped.status]
    assert_equal %i[unavailable unavailable skipped], Array.new(3) { calls.pop.outcome }
    assert_equal [:open, :closed], [client.read_breaker.state, client.breaker_state]
  end
end
