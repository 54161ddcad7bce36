# frozen_string_literal: true

require "test_helper"

class AnswerTest < Minitest::Test
  include ClientTestSupport

  TRACEPARENT = "00-0123456789abcdef0123456789abcdef-0123456789abcdef-03"

  def decorated(payload, **changes)
    variables = payload["variables"].reject { |variable| variable["key"] == "TRACEPARENT" } +
                [{ "key" => "TRACEPARENT", "value" => TRACEPARENT, "public" => true, "masked" => false }]
    answer = payload.merge("variables" => variables, "features" => payload["features"].merge("tracing" => { "traceparent" => TRACEPARENT }))
    JSON.generate("payload" => answer.merge(changes), "telemetry" => { "enabled" => true, "reason" => "enabled" })
  end

  def read(text, payload)
    CiJobTelemetry::Answer.read(text, payload)
  end

  def test_takes_the_decorated_payload_of_the_request_job
    payload = job_request["payload"]
    outcome, answered, reason = read(decorated(payload), payload)
    assert_equal [:decorated, "enabled"], [outcome, reason]
    assert_equal TRACEPARENT, answered.dig("features", "tracing", "traceparent")
  end

  def test_takes_a_request_built_with_symbol_keys
    payload = { id: 1001, variables: [{ key: "CI_JOB_ID", value: "1001" }], features: {} }
    text = decorated(JSON.parse(JSON.generate(payload)))
    assert_equal :decorated, read(text, payload).first
  end

  def test_the_decorator_may_replace_its_own_variables
    payload = job_request["payload"]
    payload["variables"] << { "key" => "TRACEPARENT", "value" => "00-stale", "public" => true, "masked" => false }
    assert_equal :decorated, read(decorated(payload), payload).first
  end

  def test_leaves_the_payload_when_telemetry_is_off
    answer = JSON.generate("payload" => {}, "telemetry" => { "enabled" => false, "reason" => "flag_disabled" })
    assert_equal [:not_decorated, nil, "flag_disabled"], read(answer, job_request["payload"])
  end

  def test_refuses_another_job_payload
    payload = job_request["payload"]
    error = assert_raises(CiJobTelemetry::Answer::Invalid) { read(decorated(payload, "id" => 1002), payload) }
    assert_equal "the payload of another job", error.message
  end

  def test_refuses_a_payload_that_lost_or_changed_a_variable
    payload = job_request["payload"]
    lost = decorated(payload).sub(/\{"key":"SECRET"[^}]*\},/, "")
    refute_includes lost, "SECRET"
    assert_raises(CiJobTelemetry::Answer::Invalid) { read(lost, payload) }
    assert_raises(CiJobTelemetry::Answer::Invalid) { read(decorated(payload).sub("s3cr3t", "other"), payload) }
  end

  def test_refuses_what_is_not_a_decorator_answer
    payload = job_request["payload"]
    ["<html>bad gateway</html>", "[]", '{"payload":{}}', JSON.generate("payload" => "x", "telemetry" => { "enabled" => true })].each do |text|
      assert_raises(CiJobTelemetry::Answer::Invalid, text) { read(text, payload) }
    end
  end
end
