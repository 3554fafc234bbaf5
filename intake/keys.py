"""Typed application keys, named after what they hold."""

from aiohttp import web
from redis import Redis
from rq import Queue
from sqlalchemy import Engine

from core.settings import Settings

SETTINGS = web.AppKey("settings", Settings)
ENGINE = web.AppKey("engine", Engine)
REDIS = web.AppKey("redis", Redis)
TURN_QUEUE = web.AppKey("turn_queue", Queue)
