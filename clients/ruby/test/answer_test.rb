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

  def changes_answer(job_id: 1001, remove: %w[TRACEPARENT TRACESTATE CI_JOB_TELEMETRY_OTLP_ENDPOINT], append: nil, features: nil)
    append ||= [{ "key" => "TRACEPARENT", "value" => TRACEPARENT, "public" => true, "masked" => false }]
    features ||= { "tracing" => { "traceparent" => TRACEPARENT } }
    JSON.generate("job_id" => job_id, "changes" => { "variables" => { "remove" => remove, "append" => append }, "features" => features },
                  "telemetry" => { "enabled" => true, "reason" => "enabled" })
  end

  def test_applies_the_changes_to_a_copy_of_the_payload
    payload = job_request["payload"]
    payload["variables"] << { "key" => "TRACESTATE", "value" => "stale=1" }
    sent = Marshal.load(Marshal.dump(payload))
    outcome, answered, reason = CiJobTelemetry::Answer.read_changes(changes_answer, payload, 1001)
    assert_equal [:decorated, "enabled"], [outcome, reason]
    assert_equal %w[CI_JOB_ID SECRET TRACEPARENT], answered["variables"].map { |variable| variable["key"] }
    assert_equal({ "trace_sections" => true, "failure_reasons" => ["script_failure"], "tracing" => { "traceparent" => TRACEPARENT } }, answered["features"])
    assert_same payload["steps"], answered["steps"], "what the changes do not touch is not copied"
    assert_equal sent, payload, "the caller's payload is not changed"
  end

  def test_keeps_a_symbol_keyed_payload_symbol_keyed
    payload = { id: 1001, variables: [{ key: "TRACEPARENT", value: "00-stale" }, { key: "CI_JOB_ID", value: "1001" }], features: { tracing: { old: 1 } } }
    _, answered, = CiJobTelemetry::Answer.read_changes(changes_answer, payload, 1001)
    assert_equal %i[id variables features], answered.keys
    assert_equal ["CI_JOB_ID", "TRACEPARENT"], answered[:variables].map { |variable| variable[:key] || variable["key"] }
    assert_equal [:tracing], answered[:features].keys
  end

  def test_refuses_changes_for_another_job_or_beyond_the_decorators_variables
    payload = job_request["payload"]
    read = ->(text) { CiJobTelemetry::Answer.read_changes(text, payload, 1001) }
    [
      [changes_answer(job_id: 1002), "the answer of another job"],
      [changes_answer(remove: %w[TRACEPARENT SECRET]), "changes to variables that are not the decorator's"],
      [changes_answer(append: [{ "key" => "OTEL_EXPORTER_OTLP_ENDPOINT", "value" => "http://x" }]), "changes to variables that are not the decorator's"],
      [changes_answer(features: { "tracing" => {}, "trace_sections" => false }), "no features.tracing"],
      [JSON.generate("job_id" => 1001, "changes" => {}, "telemetry" => { "enabled" => true }), "no variables to change"]
    ].each do |text, message|
      assert_equal message, assert_raises(CiJobTelemetry::Answer::Invalid) { read.call(text) }.message
    end
    off = JSON.generate("job_id" => 1001, "changes" => {}, "telemetry" => { "enabled" => false, "reason" => "not_sampled" })
    assert_equal [:not_decorated, nil, "not_sampled"], read.call(off)
  end

  def test_sends_whole_a_payload_whose_changes_it_could_not_apply_as_the_service_would
    assert CiJobTelemetry::Answer.appliable?(job_request["payload"])
    assert CiJobTelemetry::Answer.appliable?({ id: 1 })
    [nil, [], { "variables" => {} }, { "variables" => ["x"] }, { "features" => [] }].each do |payload|
      refute CiJobTelemetry::Answer.appliable?(payload), payload.inspect
    end
  end
end
