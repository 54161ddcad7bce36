# frozen_string_literal: true

require "test_helper"
require "socket"

# What the client does without any service: it fails open, and says why.
class ClientTest < Minitest::Test
  include ClientTestSupport

  # A port with nothing listening on it: bound, then closed.
  def closed_port_url
    server = TCPServer.new("127.0.0.1", 0)
    port = server.addr[1]
    server.close
    "http://127.0.0.1:#{port}"
  end

  def test_a_missing_secret_file_fails_open_and_is_reported
    client, calls = client_for(closed_port_url, secret_file: "/nonexistent/internal_api_secret", deadline: DEADLINE)
    request = job_request
    assert_same request["payload"], client.decorate(request)
    call = calls.pop
    assert_equal :error, call.outcome
    assert_equal "cannot read the secret file (Errno::ENOENT)", call.error
  end

  def test_a_request_that_cannot_be_sent_fails_open_without_quoting_it
    bad = "s3cr3t-\xff".b.force_encoding(Encoding::UTF_8)
    # The payload is sent only when the whole payload is asked for; the job always is.
    { payload: ->(request) { request["payload"]["variables"] << { "key" => "BAD", "value" => bad } },
      changes: ->(request) { request["job"]["token"] = bad } }.each do |answer, spoil|
      client, calls = client_for(closed_port_url, secret_file: secret_file_with(Random.new(2).bytes(32)), deadline: DEADLINE, answer: answer)
      request = job_request
      spoil.call(request)
      assert_same request["payload"], client.decorate(request)
      call = calls.pop
      assert_equal :error, call.outcome, answer
      refute_includes call.error.to_s, "s3cr3t"
    end
  end

  def test_a_callback_that_raises_does_not_reach_the_pickup
    client = CiJobTelemetry::Client.new(base_url: closed_port_url, secret_file: secret_file_with(Random.new(3).bytes(32)),
                                        deadline: DEADLINE, on_call: ->(_call) { raise "metrics are down" })
    request = job_request
    assert_same request["payload"], client.decorate(request)
  end

  def test_an_open_breaker_skips_the_call
    client, calls = client_for(closed_port_url, secret_file: secret_file_with(Random.new(4).bytes(32)), deadline: DEADLINE,
                                                breaker: { threshold: 2, cool_off: 60 })
    2.times { client.decorate(job_request) }
    assert_equal %i[unreachable unreachable], [calls.pop.outcome, calls.pop.outcome]
    assert_equal :open, client.breaker_state
    request = job_request
    assert_same request["payload"], client.decorate(request)
    call = calls.pop
    assert_equal [:skipped, :open], [call.outcome, call.breaker]
  end
end
