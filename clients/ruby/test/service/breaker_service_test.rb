# frozen_string_literal: true

require "test_helper"
require "net/http"

# The breaker against a service that fails and comes back: the misbehaving server's /switch prefix answers 500
# or passes calls to the real service, as told, and counts the calls that reach it.
class BreakerServiceTest < Minitest::Test
  include ClientTestSupport

  COOL_OFF = 0.3

  def switch_to(mode)
    Net::HTTP.post(URI("#{world('CJT_MISBEHAVING_URL')}/switch/-/mode"), mode)
  end

  def calls_reaching_the_service
    Integer(Net::HTTP.get(URI("#{world('CJT_MISBEHAVING_URL')}/switch/-/count")))
  end

  def test_opens_on_failures_skips_calls_then_closes_once_a_probe_succeeds
    switch_to("500")
    client, calls = client_for("#{world('CJT_MISBEHAVING_URL')}/switch", deadline: 5.0,
                                                                          breaker: { threshold: 3, window: 60, cool_off: COOL_OFF })
    3.times { |i| client.decorate(job_request(job_id: 4000 + i)) }
    assert_equal [:http_error] * 3, Array.new(3) { calls.pop.outcome }
    assert_equal :open, client.breaker_state

    reached = calls_reaching_the_service
    request = job_request(job_id: 4010)
    assert_same request["payload"], client.decorate(request)
    assert_equal :skipped, calls.pop.outcome
    assert_equal reached, calls_reaching_the_service, "an open breaker sends nothing"

    sleep COOL_OFF * 1.5
    assert_equal :half_open, client.breaker_state
    client.decorate(job_request(job_id: 4011))
    assert_equal [:http_error, :open], calls.pop.to_h.values_at(:outcome, :breaker), "a failed probe opens it again"
    assert_equal reached + 1, calls_reaching_the_service, "one probe went"

    switch_to("proxy")
    sleep COOL_OFF * 1.5
    payload = client.decorate(job_request(job_id: 4012))
    assert_equal [:decorated, :closed], calls.pop.to_h.values_at(:outcome, :breaker)
    assert_equal 4012, payload["id"]
    client.decorate(job_request(job_id: 4013))
    assert_equal :decorated, calls.pop.outcome
  end

  def test_while_the_probe_is_out_the_other_calls_are_skipped
    # The server holds each call half a second, then answers 500: the probe is out that long.
    switch_to("slow-500")
    client, calls = client_for("#{world('CJT_MISBEHAVING_URL')}/switch", deadline: 3.0, breaker: { threshold: 1, cool_off: COOL_OFF })
    client.decorate(job_request(job_id: 4020))
    assert_equal [:http_error, :open], calls.pop.to_h.values_at(:outcome, :breaker)
    reached = calls_reaching_the_service
    sleep COOL_OFF * 1.5

    probe = Thread.new { client.decorate(job_request(job_id: 4021)) }
    wait_until = monotonic + 10
    sleep 0.01 until calls_reaching_the_service > reached || monotonic > wait_until
    assert_equal reached + 1, calls_reaching_the_service, "the probe reached the service"
    others = Array.new(3) { |i| client.decorate(job_request(job_id: 4022 + i)) && calls.pop.outcome }
    probe.join
    assert_equal [:skipped] * 3, others
    assert_equal [:http_error, :open], calls.pop.to_h.values_at(:outcome, :breaker)
    assert_equal reached + 1, calls_reaching_the_service
  end
end
