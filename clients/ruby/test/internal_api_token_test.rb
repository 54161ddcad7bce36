# frozen_string_literal: true

require "test_helper"
require "jwt"

class InternalApiTokenTest < Minitest::Test
  include ClientTestSupport

  VECTOR = JSON.parse(File.read(File.join(REPOSITORY, "test/fixtures/internal-api-token-vector.json")))

  def token_at(clock, secret: VECTOR["secret_base64"].unpack1("m"))
    CiJobTelemetry::InternalApiToken.new(secret, issuer: VECTOR["issuer"], clock: clock)
  end

  def test_signs_the_shared_vector_byte_for_byte_as_the_node_signer
    assert_equal VECTOR["header"], token_at(-> { VECTOR["iat"] }).current
  end

  def test_a_standard_jwt_library_verifies_it_with_the_claims_the_service_checks
    iat = Time.now.to_i
    claims, header = JWT.decode(token_at(-> { iat }).current, VECTOR["secret_base64"].unpack1("m"), true,
                                algorithm: "HS256", iss: "gitlab", verify_iss: true, verify_iat: true)
    assert_equal({ "alg" => "HS256", "typ" => "JWT" }, header)
    assert_equal({ "iss" => "gitlab", "iat" => iat, "exp" => iat + 60 }, claims)
  end

  def test_a_token_is_signed_again_when_the_second_turns
    now = 1_764_000_000
    token = token_at(-> { now })
    first = token.current
    assert_same first, token.current, "the same second reuses the token"
    now += 1
    refute_equal first, token.current
    assert_equal now, JWT.decode(token.current, nil, false).first["iat"]
  end

  def test_reads_the_secret_file_as_the_service_does
    secret = Random.new(1).bytes(32)
    path = secret_file_with(secret)
    File.write(path, "  #{File.read(path)}\n")
    assert_equal secret.b, CiJobTelemetry::InternalApiToken.read_secret(path)
  end

  def test_refuses_a_secret_file_the_service_would_refuse
    assert_raises(CiJobTelemetry::InternalApiToken::InvalidSecret) do
      CiJobTelemetry::InternalApiToken.read_secret(secret_file_with("too short"))
    end
    not_base64 = secret_file_with("x" * 32)
    File.write(not_base64, "not base64 at all!")
    assert_raises(CiJobTelemetry::InternalApiToken::InvalidSecret) { CiJobTelemetry::InternalApiToken.read_secret(not_base64) }
  end

  def test_inspecting_it_shows_no_secret
    secret = "s" * 32
    refute_includes CiJobTelemetry::InternalApiToken.new(secret).inspect, secret
  end
end
