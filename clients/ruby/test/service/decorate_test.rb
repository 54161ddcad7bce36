# frozen_string_literal: true

require "test_helper"

# Against the real service (CJT_SERVICE_URL), whose flags enable telemetry for project 7 only.
class DecorateTest < Minitest::Test
  include ClientTestSupport

  # Generous: these tests check what comes back, not how fast (the first call also connects).
  DEADLINE_FOR_ANSWERS = 5.0

  def test_a_job_the_flag_enables_comes_back_decorated
    client, calls = client_for(world("CJT_SERVICE_URL"), deadline: DEADLINE_FOR_ANSWERS)
    request = job_request(job_id: 3001)
    sent = Marshal.load(Marshal.dump(request["payload"]))
    payload = client.decorate(request)

    call = calls.pop
    assert_equal [:decorated, "enabled", 200], [call.outcome, call.reason, call.status]
    assert_equal 3001, payload["id"]
    tracing = payload.dig("features", "tracing")
    assert_match(/\A00-\h{32}-\h{16}-03\z/, tracing["traceparent"])
    assert_match %r{/jobs/3001/[^/]+/v1/traces\z}, tracing["otel_endpoints"].first["url"]
    variables = payload["variables"].to_h { |variable| [variable["key"], variable] }
    assert_equal "s3cr3t", variables["SECRET"]["value"], "the job's own variables are kept"
    assert_equal tracing["traceparent"], variables["TRACEPARENT"]["value"]
    assert variables["CI_JOB_TELEMETRY_OTLP_ENDPOINT"]["masked"]
    assert_equal sent, request["payload"], "the request's payload itself is not changed"
  end

  def test_a_request_built_with_symbol_keys_is_decorated_too
    client, calls = client_for(world("CJT_SERVICE_URL"), deadline: DEADLINE_FOR_ANSWERS)
    request = JSON.parse(JSON.generate(job_request(job_id: 3002)), symbolize_names: true)
    payload = client.decorate(request)
    assert_equal :decorated, calls.pop.outcome
    # The changes keep the caller's kind of keys; what they add has string keys, as the whole payload answer has.
    assert_equal 3002, payload[:id]
    assert_match(/\A00-\h{32}-\h{16}-03\z/, payload[:features]["tracing"]["traceparent"])
    assert_equal "TRACEPARENT", payload[:variables][-2]["key"]
  end

  def test_a_job_the_flag_leaves_out_comes_back_untouched
    client, calls = client_for(world("CJT_SERVICE_URL"), deadline: DEADLINE_FOR_ANSWERS)
    request = job_request(job_id: 3003, project_id: 8)
    assert_same request["payload"], client.decorate(request)
    call = calls.pop
    assert_equal [:not_decorated, "flag_disabled", 200], [call.outcome, call.reason, call.status]
    assert_equal :closed, call.breaker, "a job left out is an answer, not a failure"
  end

  def test_a_wrong_secret_comes_back_untouched_and_is_reported_without_the_token
    wrong_secret = Random.new.bytes(32)
    client, calls = client_for(world("CJT_SERVICE_URL"), secret_file: secret_file_with(wrong_secret), deadline: DEADLINE_FOR_ANSWERS)
    request = job_request(job_id: 3004)
    assert_same request["payload"], client.decorate(request)
    call = calls.pop
    assert_equal [:unauthorized, 401], [call.outcome, call.status]
    assert_equal "invalid gitlab-ci-telemetry-api-request token", call.error
    refute_includes call.to_h.to_s, CiJobTelemetry::InternalApiToken.new(wrong_secret).current
  end

  def test_calls_one_after_another_share_one_kept_alive_connection
    client, calls = client_for("#{world('CJT_MISBEHAVING_URL')}/proxy", deadline: DEADLINE_FOR_ANSWERS)
    before = Integer(Net::HTTP.get(URI("#{world('CJT_MISBEHAVING_URL')}/-/connections")))
    5.times { |i| client.decorate(job_request(job_id: 3010 + i)) }
    assert_equal [:decorated] * 5, Array.new(5) { calls.pop.outcome }
    assert_equal before + 1, Integer(Net::HTTP.get(URI("#{world('CJT_MISBEHAVING_URL')}/-/connections")))
  end

  # The changes (the default) applied here and the whole payload the service decorates give the runner one payload.
  def test_the_changes_applied_here_give_the_payload_the_service_would_have_decorated
    changes_client, changes_calls = client_for(world("CJT_SERVICE_URL"), deadline: DEADLINE_FOR_ANSWERS)
    payload_client, payload_calls = client_for(world("CJT_SERVICE_URL"), deadline: DEADLINE_FOR_ANSWERS, answer: :payload)
    stale = [{ "key" => "TRACEPARENT", "value" => "00-stale", "public" => true }, { "key" => "TRACESTATE", "value" => "x=1", "public" => true }]
    [
      job_request(job_id: 3020),
      job_request(job_id: 3021).tap { |request| request["payload"].delete("variables") && request["payload"].delete("features") },
      job_request(job_id: 3022).tap { |request| request["payload"]["variables"].concat(stale) },
      JSON.parse(JSON.generate(job_request(job_id: 3023)), symbolize_names: true),
      job_request(job_id: 3024, project_id: 8)
    ].each do |request|
      payload = Answer.field(request, "payload")
      sent = Marshal.load(Marshal.dump(payload))
      changed = changes_client.decorate(request)
      whole = payload_client.decorate(request)
      outcomes = [changes_calls.pop.outcome, payload_calls.pop.outcome]
      assert_equal [outcomes.last] * 2, outcomes
      assert_equal JSON.parse(JSON.generate(whole)), JSON.parse(JSON.generate(changed)), "job #{Answer.field(payload, 'id')}"
      assert_equal sent, payload, "the request's payload itself is not changed"
    end
  end

  def test_the_changes_request_does_not_carry_the_payload
    client, calls = client_for("#{world('CJT_MISBEHAVING_URL')}/proxy", deadline: DEADLINE_FOR_ANSWERS)
    request = job_request(job_id: 3030)
    request["payload"]["variables"] << { "key" => "BIG", "value" => "x" * 100_000, "public" => false, "masked" => false }
    payload = client.decorate(request)
    call = calls.pop
    assert_equal :decorated, call.outcome
    assert_equal "x" * 100_000, payload["variables"].find { |variable| variable["key"] == "BIG" }["value"]
    assert_operator Integer(Net::HTTP.get(URI("#{world('CJT_MISBEHAVING_URL')}/-/last-request-bytes"))), :<, 2_000
  end

  Answer = CiJobTelemetry::Answer
end
