# frozen_string_literal: true

require "test_helper"

# Each way the service can fail a pickup, served by test/e2e/ruby-client.e2e-spec.ts's misbehaving server
# (CJT_MISBEHAVING_URL, one path prefix per behaviour) or by nobody (CJT_DOWN_URL): the pickup always gets its own
# payload back, untouched, near the deadline, and the call says what happened.
class FailuresTest < Minitest::Test
  include ClientTestSupport

  def fails_open(base_url, answer: :changes)
    # A breaker that never opens here: each test sees the failure itself.
    client, calls = client_for(base_url, deadline: DEADLINE, breaker: { threshold: 1000 }, answer: answer)
    request = job_request
    result, seconds = timed_decorate(client, request)
    assert_untouched_in_time(request, result, seconds)
    calls.pop
  end

  def misbehaving(behaviour)
    "#{world('CJT_MISBEHAVING_URL')}/#{behaviour}"
  end

  def test_service_down
    call = fails_open(world("CJT_DOWN_URL"))
    assert_equal [:unreachable, "Errno::ECONNREFUSED"], [call.outcome, call.error]
  end

  def test_connection_reset_before_an_answer
    assert_equal :unreachable, fails_open(misbehaving("reset")).outcome
  end

  def test_service_stalling_before_answering
    assert_equal [:timeout, "Net::ReadTimeout"], fails_open(misbehaving("stall-before-answer")).to_h.values_at(:outcome, :error)
  end

  def test_service_stalling_mid_answer
    call = fails_open(misbehaving("stall-mid-answer"))
    assert_equal [:timeout, "Net::ReadTimeout"], [call.outcome, call.error]
  end

  # One byte every 20 ms: no single read waits long, so only a deadline over the whole call ends it.
  def test_service_trickling_its_answer
    assert_equal :timeout, fails_open(misbehaving("trickle")).outcome
  end

  def test_service_answering_500
    call = fails_open(misbehaving("500"))
    assert_equal [:http_error, 500], [call.outcome, call.status]
  end

  def test_service_answering_garbage
    call = fails_open(misbehaving("garbage"))
    assert_equal [:invalid_answer, "not JSON"], [call.outcome, call.error]
  end

  def test_something_that_is_not_http
    assert_equal :invalid_answer, fails_open(misbehaving("not-http")).outcome
  end

  def test_an_answer_far_larger_than_the_request
    assert_equal :invalid_answer, fails_open(misbehaving("huge")).outcome
  end

  def test_another_job_payload
    call = fails_open(misbehaving("other-job"), answer: :payload)
    assert_equal [:invalid_answer, "the payload of another job"], [call.outcome, call.error]
  end

  def test_changes_for_another_job
    call = fails_open(misbehaving("other-job"))
    assert_equal [:invalid_answer, "the answer of another job"], [call.outcome, call.error]
  end

  def test_a_payload_that_lost_variables
    call = fails_open(misbehaving("lost-variables"), answer: :payload)
    assert_equal [:invalid_answer, "variables missing"], [call.outcome, call.error]
  end

  def test_changes_that_would_drop_a_variable_not_the_decorators
    call = fails_open(misbehaving("lost-variables"))
    assert_equal [:invalid_answer, "changes to variables that are not the decorator's"], [call.outcome, call.error]
  end
end
